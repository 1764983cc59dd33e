"""Quick start with only a base URL: the model creates its own client.

Needs an SGLang server on localhost:30000 (or `strands-tito engine --port 30000` for a local stand-in).
"""

import asyncio

from strands import Agent
from strands_tools import calculator
from transformers import AutoTokenizer

from strands_tito import SGLangModel


async def main():
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-4B-Instruct-2507")
    model = SGLangModel(tokenizer=tokenizer, base_url="http://localhost:30000")
    agent = Agent(model=model, tools=[calculator])

    model.reset()  # Reset TITO state for new episode
    result = await agent.invoke_async("What is 25 * 17?")
    print(result)

    # Access TITO data for RL training
    print(f"Tokens: {model.token_manager.token_ids}")
    print(f"Loss mask: {model.token_manager.loss_mask}")
    print(f"Logprobs: {model.token_manager.logprobs}")


asyncio.run(main())
