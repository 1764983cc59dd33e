"""Trace capture: each model call's exact tokens on Strands' own OpenTelemetry spans, and getting them out.

- ``recorder`` puts turns, calls, rewards and end signals on spans, keeps the one per-agent state type
  (:class:`AgentState`) and holds the embedded path (trajectories assembled in process into a JSONL file).
- ``switch_on`` turns capture on from environment variables (``STRANDS_TITO_CAPTURE``, ``opentelemetry-instrument``);
  ``sampler`` decides which spans a provider it installs records (those capture reads, unless ``OTEL_TRACES_SAMPLER``).
  ``span_ids`` gives that provider ids drawn without touching the ``random`` module's global state.
- ``spool_processor`` and ``spool`` deliver strands-tito spans over OTLP without dropping any (memory queue + disk
  spool).
- ``openai`` captures stock Strands ``OpenAIModel`` agents.
- ``deferred`` runs what garbage-collection finalizers queue (a released agent's end signal) on capture's own thread.

Capture never imports the providers; the providers call into it.
"""

from strands_tito.capture.recorder import AgentState, RewardTargetError, record_reward

__all__ = ["AgentState", "RewardTargetError", "record_reward"]
