"""Token-in/token-out model providers: the agent side, which talks to the inference server.

- ``sglang`` (:class:`SGLangModel`, SGLang's native ``/generate``) and ``vllm`` (:class:`VLLMModel`) are thin: each
  only sends one generation request and validates the reply (``reply_checks``).
- ``token_model`` (:class:`TokenModel`) is their shared base: per-agent trajectories, prompts, tool calls, limits,
  capture hooks and error mapping; ``generation`` holds what a provider sends and gets back (the request, the
  validated reply, the per-value reply checks and reply errors); ``turn_events`` builds the Strands events of a
  recorded turn.
- ``client`` (:class:`TokenClient`, with ``connection_pool``, its lean keep-alive pool) is the backend-neutral
  transport: retries, deadlines, cancellation; ``sglang_client`` (:class:`SGLangClient`) and ``vllm_client``
  (:class:`VLLMClient`) add each backend's routes and name it in every message.
- ``prompt`` encodes only the new messages each turn (``rendering`` renders real chat templates, ``families`` holds
  each model family's facts, ``reasoning`` splits reasoning from the answer text).
- ``tool_parsers`` reads tool calls strictly, one module per format; ``limiter`` bounds the agent loop; ``slime``
  holds the slime integration helpers.

The layers below (trajectory, span and record schema, assembler, collector, exporters) never import this package.
"""
