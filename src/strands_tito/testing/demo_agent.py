"""The demo's agent: an ordinary Strands agent with a tool and no telemetry code; capture is switched on from outside.

`strands-tito demo` runs it (it ships in the package so that the demo works from an installed wheel).

Needs an SGLang server at $SGLANG_URL (or the local stand-in: `strands-tito engine --port 30000`). Any of:

    STRANDS_TITO_CAPTURE=1 OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 python -m strands_tito.testing.demo_agent
    STRANDS_TITO_CAPTURE=jsonl:trajectories.jsonl python -m strands_tito.testing.demo_agent
    OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_METRICS_EXPORTER=none \\
        OTEL_LOGS_EXPORTER=none OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 \\
        opentelemetry-instrument python -m strands_tito.testing.demo_agent

`STRANDS_TITO_FAMILY=glm-4.6` (any name in strands_tito.providers.families.FAMILIES) runs it on that model family's real
chat template, stand-in tokenizer and tool parser, e.g. against `strands-tito engine --chat-template glm-4.6`.

`--app-telemetry ENDPOINT` plays an application that sets up tracing itself, as many do
(`StrandsTelemetry().setup_otlp_exporter(endpoint=...)`): capture then attaches to that tracer provider instead of
replacing it, and the application's exporter still gets its spans.
"""

from __future__ import annotations

import argparse
import os

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager

from strands_tito.providers.families import FAMILIES
from strands_tito.providers.sglang import SGLangModel
from strands_tito.settings import get_settings
from strands_tito.testing.family_tokenizers import family_tokenizer
from strands_tito.testing.tokenizers import build_qwen3_tokenizer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(argv: list[str] | None = None) -> Agent:
    """Ask the agent for a sum, print its answer and return the agent."""
    parser = argparse.ArgumentParser(description="An ordinary Strands agent with a tool and no telemetry code.")
    parser.add_argument("--app-telemetry", metavar="ENDPOINT", help="OTLP/HTTP traces URL the app itself exports to")
    args = parser.parse_args(argv)
    if args.app_telemetry:
        from strands.telemetry import StrandsTelemetry

        StrandsTelemetry().setup_otlp_exporter(endpoint=args.app_telemetry)

    family = get_settings().family  # e.g. glm-4.6; unset: Qwen3
    if family:
        tokenizer, tool_parser = family_tokenizer(family), FAMILIES[family].parser
    else:
        tokenizer, tool_parser = build_qwen3_tokenizer(), None
    model = SGLangModel(tokenizer=tokenizer, tool_parser=tool_parser, base_url=os.environ["SGLANG_URL"])
    agent = Agent(model=model, tools=[add], conversation_manager=NullConversationManager(), callback_handler=None)
    print(agent("What is 25 + 17? Use the add tool."))
    return agent


if __name__ == "__main__":
    # No reset and no flush: the agent stays referenced until exit, where its trajectory's end signal goes out before
    # the exporters shut down.
    agent = main()
