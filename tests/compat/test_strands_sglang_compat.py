"""strands-sglang 0.6.2's module paths, names and behaviours, as a user who changed one import meets them.

These tests pin the compatibility names (``strands_tito.compat``); everything behavioural runs a real Strands agent
against the local engine over HTTP, and the trajectory is checked against what the engine received and produced.
"""

from __future__ import annotations

import importlib
import json
import uuid
from typing import Any
from unittest.mock import MagicMock

import pytest

from strands_tito import SGLangClient, SGLangModel
from strands_tito.testing.engine import Reply, Script

from ..helpers.agents import assert_matches_engine, calculator, generate_records, hermes_call, make_agent, make_model


def test_every_0_6_2_module_path_and_name_imports() -> None:
    # 0.6.2's modules and their public names (read from its sdist on PyPI), after `strands_sglang` -> `strands_tito`.
    expected = {
        "client": ["SGLangClient", "DEFAULT_MAX_CONNECTIONS", "NON_RETRYABLE_STATUS_CODES", "CONTEXT_LENGTH_PATTERNS"],
        "exceptions": [
            "SGLangClientError", "SGLangHTTPError", "SGLangContextLengthError", "SGLangThrottledError",
            "SGLangConnectionError", "SGLangDecodingError",
        ],
        "utils": ["get_client", "get_client_from_slime_args", "get_tokenizer"],
        "limiter": [
            "LoopLimiter", "LoopLimitReachedError", "MaxToolIterationsReachedError", "MaxToolCallsReachedError",
            "MaxMessagesReachedError",
        ],
        "rollout": ["Rollout"],
        "sglang": ["SGLangModel"],
        "tool_parsers": [
            "ToolParseResult", "ToolParser", "GLMToolParser", "HermesToolParser", "KimiK2ToolParser",
            "QwenXMLToolParser", "TOOL_PARSER_REGISTRY", "get_tool_parser",
        ],
        "tool_parsers.base": [
            "ToolParseResult", "ToolParser", "TOOL_PARSER_REGISTRY", "get_tool_parser", "register_tool_parser",
        ],
        "tool_parsers.hermes": ["HermesToolParser"],
        "tool_parsers.qwen_xml": ["QwenXMLToolParser"],
        "tool_parsers.glm": ["GLMToolParser"],
        "tool_parsers.kimi_k2": ["KimiK2ToolParser"],
    }  # fmt: skip
    for module, names in expected.items():
        imported = importlib.import_module(f"strands_tito.{module}")
        assert [n for n in names if not hasattr(imported, n)] == [], module
    import strands_tito.client as client
    import strands_tito.exceptions as exceptions
    from strands_tito.tool_parsers.base import TOOL_PARSER_REGISTRY

    # The registry names 0.6.2 registered, each the class its module exports.
    for name, module, cls in [
        ("hermes", "hermes", "HermesToolParser"),
        ("qwen_xml", "qwen_xml", "QwenXMLToolParser"),
        ("glm", "glm", "GLMToolParser"),
        ("kimi_k2", "kimi_k2", "KimiK2ToolParser"),
    ]:
        assert TOOL_PARSER_REGISTRY[name] is getattr(
            importlib.import_module(f"strands_tito.tool_parsers.{module}"), cls
        )
    # The constants are the ones the client uses.
    assert SGLangClient("http://127.0.0.1:1").retry.never_retry_statuses == client.NON_RETRYABLE_STATUS_CODES
    assert SGLangClient("http://127.0.0.1:1").max_connections == client.DEFAULT_MAX_CONNECTIONS
    # 0.6.2's exception constructor, and the nested config type.
    error = exceptions.SGLangHTTPError("HTTP 500: boom", status=500, body="boom")
    assert (str(error), error.status, error.body) == ("HTTP 500: boom", 500, "boom")
    assert isinstance(exceptions.SGLangContextLengthError("x", status=400), exceptions.SGLangHTTPError)
    assert SGLangModel.SGLangConfig.__optional_keys__ >= {
        "sampling_params", "return_logprob", "return_routed_experts", "enable_thinking", "context_window_limit",
    }  # fmt: skip


def test_unknown_parser_name_is_a_key_error_as_in_0_6_2() -> None:
    from strands_tito.tool_parsers import get_tool_parser

    with pytest.raises(KeyError, match="unknown tool parser 'nope'"):
        get_tool_parser("nope")
    with pytest.raises(ValueError):  # and strands-tito's own ValueError
        get_tool_parser("nope")


def test_a_tokenizer_double_builds_a_model() -> None:
    # strands-env's unit tests build the model with MagicMock tokenizers and never render a prompt.
    model = SGLangModel(client=MagicMock(spec=SGLangClient), tokenizer=MagicMock())
    assert model.processed_messages == 0 and model.tool_parse_errors == {}


# -- custom parsers written the 0.6.2 way ------------------------------------------------------------------------


async def test_a_0_6_2_style_custom_parser_runs_unchanged(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    from strands_tito.tool_parsers import HermesToolParser, ToolParser, ToolParseResult, get_tool_parser
    from strands_tito.tool_parsers.base import TOOL_PARSER_REGISTRY, register_tool_parser

    @register_tool_parser("pipe_calls")
    class PipeParser(ToolParser):
        """``<call>name|{json}</call>``: written exactly as a strands-sglang 0.6.2 user would."""

        def parse(self, text: str) -> list[ToolParseResult]:
            text = self.think_pattern.sub("", text)
            results = []
            for i, match in enumerate(self.tool_pattern.finditer(text)):
                name, _, args = match.group(1).partition("|")
                try:
                    results.append(
                        ToolParseResult(id=f"call_{uuid.uuid4().hex[:6]}{i}", name=name, input=json.loads(args))
                    )
                except json.JSONDecodeError:
                    results.append(ToolParseResult.from_parse_error(id=f"bad{i}", raw=match.group(1), name=name))
            return results

    register_tool_parser("qwen")(HermesToolParser)  # an alias for a built-in keeps the built-in's name
    try:
        assert type(get_tool_parser("qwen")) is HermesToolParser and HermesToolParser.name == "hermes"
        assert PipeParser.name == "pipe_calls"
        parser = get_tool_parser("pipe_calls", tool_start_token="<call>", tool_end_token="</call>")
        assert isinstance(parser, PipeParser) and parser.tool_start_token == "<call>"
        turns = [
            Reply(
                text='<think>maybe <call>calculator|{"expression": "0"}</call></think>'
                '<call>calculator|{"expression": "6 * 7"}</call>'
            ),
            Reply(text="<call>calculator|{broken</call>"),
            Reply(text="42"),
        ]  # fmt: skip
        engine = start_engine(Script(turns=turns))
        model = make_model(engine, qwen3)
        model.tool_parser = parser
        agent = make_agent(model, [calculator])
        await agent.invoke_async("What is 6 * 7?")
        results = [b["toolResult"] for m in agent.messages for b in m["content"] if "toolResult" in b]
        assert [r["status"] for r in results] == ["success", "error"]  # the call in the reasoning never ran
        assert results[0]["content"][0]["text"] == "42"
        assert "calculator|{broken" in results[1]["content"][0]["text"]  # the model sees its malformed call
        assert model.tool_parse_errors == {"calculator": 1}
        assert_matches_engine(model.trajectory, generate_records(engine))
    finally:
        TOOL_PARSER_REGISTRY.pop("pipe_calls", None)
        TOOL_PARSER_REGISTRY.pop("qwen", None)


def test_from_parse_error_and_unknown_name() -> None:
    from strands_tito.tool_parsers import ToolParseResult

    unnamed = ToolParseResult.from_parse_error(id="a", raw="<oops>")
    named = ToolParseResult.from_parse_error(id="b", raw="{bad", name="calc")
    ok = ToolParseResult(id="c", name="calc", input={"x": 1})
    assert (unnamed.name, unnamed.is_error, unnamed.payload) == (ToolParseResult.UNKNOWN_NAME, True, "<oops>")
    assert ToolParseResult.UNKNOWN_NAME == "unknown_tool"
    assert (named.name, named.is_error) == ("calc", True)
    assert (ok.is_error, ok.raw, ok.payload) == (False, None, '{"x": 1}')


async def test_hermes_with_other_tags(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    from strands_tito.tool_parsers import HermesToolParser

    call = '<function_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</function_call>'
    engine = start_engine(Script(turns=[Reply(text=call), Reply(text="5")]))
    model = make_model(engine, qwen3)
    model.tool_parser = HermesToolParser(tool_start_token="<function_call>", tool_end_token="</function_call>")
    agent = make_agent(model, [calculator])
    await agent.invoke_async("2 + 3?")
    assert agent.event_loop_metrics.tool_metrics["calculator"].success_count == 1
    assert_matches_engine(model.trajectory, generate_records(engine))


async def test_think_tokens_by_0_6_2_names_and_the_patterns(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    """0.6.2's ``think_start_token`` / ``think_end_token`` set the reasoning tags; ``tool_pattern`` captures a call's
    body and ``think_pattern`` a whole reasoning block, on the built-in parsers and a 0.6.2-style subclass."""
    from strands_tito.tool_parsers import HermesToolParser, ToolParser, ToolParseResult, get_tool_parser

    class Custom(ToolParser):
        def parse(self, text: str) -> list[ToolParseResult]:
            return []

    for parser in (
        HermesToolParser(think_start_token="<reason>", think_end_token="</reason>"),
        get_tool_parser("hermes", think_start_token="<reason>", think_end_token="</reason>"),
        Custom(think_start_token="<reason>", think_end_token="</reason>"),
    ):
        assert (parser.think_start_token, parser.think_end_token) == ("<reason>", "</reason>")
        assert parser.think_pattern.sub("", "a<reason>x\ny</reason>b") == "ab"
        found = parser.tool_pattern.search('<tool_call>\n {"name": "n"} \n</tool_call>')
        assert found is not None and found.group(1) == '{"name": "n"}'

    # A call drafted inside the renamed reasoning block is not run; the one after it is.
    drafted = "<reason>" + hermes_call("calculator", expression="1 + 1") + "</reason>"
    engine = start_engine(
        Script(turns=[Reply(text=drafted + hermes_call("calculator", expression="2 + 3")), Reply(text="5")])
    )
    model = make_model(engine, qwen3)
    model.tool_parser = HermesToolParser(think_start_token="<reason>", think_end_token="</reason>")
    agent = make_agent(model, [calculator])
    await agent.invoke_async("2 + 3?")
    uses = [b["toolUse"]["input"] for m in agent.messages for b in m["content"] if "toolUse" in b]
    assert uses == [{"expression": "2 + 3"}]
    assert_matches_engine(model.trajectory, generate_records(engine))


def test_the_0_6_2_checks_left_out_behave_as_docs_migration_says() -> None:
    """Keyword construction, a routing slice before any turn and ``raw`` on a built-in parser's valid call: each
    differs from 0.6.2 as docs/migration.md says, with the checked way it names."""
    from strands_tito import Rollout
    from strands_tito.tool_parsers import HermesToolParser
    from strands_tito.trajectory import TrajectoryError

    fields = {"token_ids": [1, 2, 3], "loss_mask": [0, 0, 1], "logprobs": [None, None, -0.5]}
    with pytest.raises(TrajectoryError, match="model_validate"):
        Rollout(**fields)  # type: ignore[arg-type]
    built = Rollout.model_validate({**fields, "segment_info": [(False, 2), (True, 1)]})
    assert (built.token_ids, built.loss_mask, built.segment_info) == ([1, 2, 3], [0, 0, 1], [(False, 2), (True, 1)])

    by_hand = Rollout()
    by_hand.add_prompt([1, 2])
    with pytest.raises(TrajectoryError, match="call add_response"):
        by_hand.add_routed_experts("AAAA")
    assert by_hand.routed_experts == []

    markup = '<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call>'
    (call,) = HermesToolParser().parse(markup)
    assert (call.is_error, call.payload, call.raw) == (False, '{"x": 1}', markup)


# -- malformed calls are counted under the tool the model named ---------------------------------------------------


async def test_invalid_json_is_counted_under_the_tool_name(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    broken = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 +"\n</tool_call>'
    engine = start_engine(
        Script(turns=[Reply(text=broken), Reply(text=hermes_call("calculator", expression="1 + 1")), Reply(text="2")])
    )
    model = make_model(engine, qwen3)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("1 + 1?")
    # What strands-env's per-tool metrics read: 0.6.2 gives calls 2, errors 1, parse_errors 1.
    metrics = agent.event_loop_metrics.tool_metrics["calculator"]
    assert (metrics.call_count, metrics.error_count, model.tool_parse_errors) == (2, 1, {"calculator": 1})
    first = next(b["toolResult"] for b in agent.messages[2]["content"] if "toolResult" in b)
    assert first["status"] == "error" and first["content"][0]["text"].startswith(
        "Invalid tool call: tool call is not valid JSON"
    )
    assert_matches_engine(model.trajectory, generate_records(engine))


# -- the client ------------------------------------------------------------------------------------------------


async def test_generate_forwards_any_generate_field(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="Hi")]))
    client = SGLangClient(engine.base_url)
    ids = qwen3.encode("Hello", add_special_tokens=False)
    reply = await client.generate(
        ids, sampling_params={"max_new_tokens": 8}, custom_logit_processor=None, lora_path=None, stream=True
    )
    assert reply["text"] == "Hi"
    (record,) = [r for r in engine.records if r.path == "/generate"]
    assert {"custom_logit_processor", "lora_path"} <= set(record.request) and record.request["stream"] is False
    await client.close()


async def test_format_tool_specs_is_an_extension_point(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    class TerseTools(SGLangModel):
        def format_tool_specs(self, tool_specs: Any) -> list[dict[str, Any]] | None:
            tools = super().format_tool_specs(tool_specs) or []
            for tool in tools:
                tool["function"]["description"] = "Arithmetic only."
            return tools

    engine = start_engine(Script(turns=[Reply(text="Fine.")]))
    model = TerseTools(client=SGLangClient(engine.base_url), tokenizer=qwen3, sampling_params={"max_new_tokens": 32})
    await make_agent(model, [calculator]).invoke_async("Hi")
    prompt = qwen3.decode(model.trajectory.token_ids[: model.trajectory.initial_prompt_length])
    assert '"description": "Arithmetic only."' in prompt and "Evaluate an arithmetic expression" not in prompt
    assert_matches_engine(model.trajectory, generate_records(engine))
    assert model.processed_messages == 2  # the user message and the model's reply


async def test_format_messages_is_an_extension_point(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    # 0.6.2's way: a classmethod override that changes how messages reach the template, here the tool results
    # (for the first prompt and for each continuation alike).
    class TaggedResults(SGLangModel):
        @classmethod
        def format_messages(cls, messages: Any, system_prompt: str | None = None) -> list[dict[str, Any]]:
            formatted = super().format_messages(messages, system_prompt)
            for message in formatted:
                if message["role"] == "tool":
                    message["content"] = f"[checked] {message['content']}"
                elif message["role"] == "system":
                    message["content"] += " Be brief."
            return formatted

    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="6*7")), Reply(text="42.")]))
    model = TaggedResults(client=SGLangClient(engine.base_url), tokenizer=qwen3, sampling_params={"max_new_tokens": 64})
    await make_agent(model, [calculator]).invoke_async("What is 6*7?")
    text = qwen3.decode(model.trajectory.token_ids)
    assert "You are a helpful assistant. Be brief." in text
    assert "<tool_response>\n[checked] 42\n</tool_response>" in text
    assert_matches_engine(model.trajectory, generate_records(engine))
    # The default model renders the same episode without either change.
    plain_engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="6*7")), Reply(text="42.")])
    )
    plain = SGLangModel(
        client=SGLangClient(plain_engine.base_url), tokenizer=qwen3, sampling_params={"max_new_tokens": 64}
    )
    await make_agent(plain, [calculator]).invoke_async("What is 6*7?")
    assert "[checked]" not in qwen3.decode(plain.trajectory.token_ids)
