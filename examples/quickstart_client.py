"""Quick start with an explicit SGLangClient and the Qwen XML tool-call parser.

Needs an SGLang server at $SGLANG_URL, default localhost:30000, serving Qwen3.5 (or the local stand-in
`strands-tito engine` with a script of Qwen XML tool calls, docs/engine.md).
"""

import asyncio
import os

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from transformers import AutoTokenizer

from strands_tito import SGLangClient, SGLangModel
from strands_tito.providers.tool_parsers import get_tool_parser


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def main():
    client = SGLangClient(base_url=os.environ.get("SGLANG_URL", "http://localhost:30000"))
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3.5-4B")
    model = SGLangModel(client=client, tokenizer=tokenizer, tool_parser=get_tool_parser("qwen_xml"))
    agent = Agent(model=model, tools=[multiply], conversation_manager=NullConversationManager())

    result = await agent.invoke_async("What is 25 * 17?")
    print(result)

    # Access token data for RL training
    print(f"Tokens: {model.trajectory.token_ids}")
    print(f"Loss mask: {model.trajectory.loss_mask}")
    print(f"Logprobs: {model.trajectory.logprobs}")


asyncio.run(main())
