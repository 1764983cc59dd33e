"""Quick start with an explicit SGLangClient and the Qwen XML tool-call parser.

Needs an SGLang server on localhost:30000 (or `strands-tito engine --port 30000` for a local stand-in).
"""

import asyncio

from strands import Agent
from strands_tools import calculator
from transformers import AutoTokenizer

from strands_tito import SGLangClient, SGLangModel
from strands_tito.providers.tool_parsers import get_tool_parser


async def main():
    client = SGLangClient(base_url="http://localhost:30000")
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3.5-4B")
    model = SGLangModel(client=client, tokenizer=tokenizer, tool_parser=get_tool_parser("qwen_xml"))
    agent = Agent(model=model, tools=[calculator])

    result = await agent.invoke_async("What is 25 * 17?")
    print(result)

    # Access token data for RL training
    print(f"Tokens: {model.token_manager.token_ids}")
    print(f"Loss mask: {model.token_manager.loss_mask}")
    print(f"Logprobs: {model.token_manager.logprobs}")


asyncio.run(main())
