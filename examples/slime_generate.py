"""A slime custom `generate` function: tokens captured during generation, no retokenization.

Use with slime's `--custom-generate-function-path examples.slime_generate.generate` (and do not set
`--apply-chat-template`: the model applies the chat template itself).
"""

import logging

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager

from strands_tito import LoopLimiter, SGLangModel, decode_routed_experts, get_client_from_slime_args
from strands_tito.providers.tool_parsers import HermesToolParser

try:
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.types import Sample
except ImportError:  # slime is not installed: run with stand-ins
    from _slime_stubs import GenerateState, Sample

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = "You are a math assistant. Use the Python tool to check your work."
MAX_TOOL_ITERS = 5
MAX_TOOL_CALLS = None  # No limit


@tool
def execute_python_code(code: str):
    """Execute Python code and return the output."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # illustration only: sandbox model-written code in real training
    return out.getvalue()


async def generate(args, sample: Sample, sampling_params) -> Sample:
    """Generate with tokens captured during generation, no retokenization."""
    assert not args.partial_rollout, "Partial rollout not supported."

    state = GenerateState(args)
    model = SGLangModel(
        tokenizer=state.tokenizer,
        client=get_client_from_slime_args(args),  # this is a cached client
        tool_parser=HermesToolParser(),  # tool parsing for wrapped JSON tool calls
        sampling_params=sampling_params,
        return_routed_experts=True,  # MoE routing replay (R3)
    )

    tool_limiter = LoopLimiter(max_tool_iters=MAX_TOOL_ITERS, max_tool_calls=MAX_TOOL_CALLS)
    agent = Agent(
        model=model,
        tools=[execute_python_code],
        hooks=[tool_limiter],
        conversation_manager=NullConversationManager(),  # token-in/token-out needs an append-only history
        callback_handler=None,
        system_prompt=SYSTEM_PROMPT,
    )

    # Don't set --apply-chat-template in rollout args, it will make user prompt wrapped twice
    prompt = sample.prompt if isinstance(sample.prompt, str) else sample.prompt[0]["content"]

    try:
        await agent.invoke_async(prompt)
        sample.status = Sample.Status.COMPLETED
    except Exception as e:
        # Default all failed rollouts to TRUNCATED; customize your logic here if needed
        sample.status = Sample.Status.TRUNCATED
        logger.warning(f"TRUNCATED: {type(e).__name__}: {e}")

    # The token trajectory of this sample
    trajectory = model.trajectory
    prompt_len = trajectory.initial_prompt_length  # system + user are the first segment
    sample.tokens = trajectory.token_ids
    sample.loss_mask = trajectory.loss_mask[prompt_len:]
    sample.rollout_log_probs = trajectory.logprobs[prompt_len:]
    sample.response_length = len(sample.tokens) - prompt_len
    sample.response = model.tokenizer.decode(sample.tokens[prompt_len:], skip_special_tokens=False)
    sample.rollout_routed_experts = decode_routed_experts(
        model.routed_experts, seq_len=len(trajectory.token_ids), num_layers=args.num_layers, top_k=args.moe_router_topk
    )

    # Record tool call stats for reward computation if needed
    # Multiple parallel tool calls count as one tool_iter
    sample.tool_iters = tool_limiter.tool_iter_count
    sample.tool_calls = tool_limiter.tool_call_count

    model.reset()
    agent.cleanup()
    return sample
