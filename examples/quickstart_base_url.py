"""Quick start with only a base URL: the model creates its own client.

Needs an SGLang server at $SGLANG_URL, default localhost:30000 (or the local stand-in:
`strands-tito engine --port 30000 --script quickstart`).
"""

import asyncio
import os

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from transformers import AutoTokenizer

from strands_tito import SGLangModel


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def main():
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-4B-Instruct-2507")
    model = SGLangModel(tokenizer=tokenizer, base_url=os.environ.get("SGLANG_URL", "http://localhost:30000"))
    agent = Agent(model=model, tools=[multiply], conversation_manager=NullConversationManager())

    model.reset()  # Reset TITO state for new episode
    result = await agent.invoke_async("What is 25 * 17?")
    print(result)

    # Access TITO data for RL training
    print(f"Tokens: {model.trajectory.token_ids}")
    print(f"Loss mask: {model.trajectory.loss_mask}")
    print(f"Logprobs: {model.trajectory.logprobs}")


asyncio.run(main())
