"""A stock Strands agent: `OpenAIModel` against a vLLM or SGLang OpenAI-compatible server, no strands-tito code.

With capture switched on from outside, each model call's exact prompt and output token ids are recorded (the
server is asked for them), and the assembler reports whether consecutive calls shared a prefix:

    STRANDS_TITO_CAPTURE=jsonl:calls.jsonl OPENAI_BASE_URL=http://127.0.0.1:8000/v1 \\
        python examples/openai_agent.py
"""

import os

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from strands.models.openai import OpenAIModel


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


model = OpenAIModel(
    client_args={"base_url": os.environ["OPENAI_BASE_URL"], "api_key": os.environ.get("OPENAI_API_KEY", "EMPTY")},
    model_id=os.environ.get("MODEL_ID", "policy"),
    # logprobs: training needs them (Agent Lightning's trainer uses them as the rollout's old log-probabilities);
    # capture records them when the request asks for them.
    params={"max_tokens": 256, "logprobs": True},
)
agent = Agent(model=model, tools=[add], conversation_manager=NullConversationManager(), callback_handler=None)
print(agent("What is 25 + 17? Use the add tool."))
