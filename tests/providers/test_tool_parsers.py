"""Strict tool parsing: valid calls are read exactly, anything else is an error with reason and raw text."""

import pytest

from strands_tito.providers.tool_parsers import HermesToolParser, QwenXMLToolParser, get_tool_parser

CALC_SPEC = {
    "name": "calc",
    "description": "evaluate",
    "inputSchema": {"json": {"type": "object", "properties": {"expr": {"type": "string"}, "n": {"type": "integer"}}}},
}


def hermes(text: str):  # type: ignore[no-untyped-def]
    return HermesToolParser().parse(text)


def test_hermes_reads_calls_in_order() -> None:
    text = (
        'Let me compute.\n<tool_call>\n{"name": "calc", "arguments": {"expr": "1+1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>'
    )
    calls = hermes(text)
    assert [(c.name, c.input, c.error) for c in calls] == [("calc", {"expr": "1+1"}, None), ("other", {}, None)]
    assert calls[0].raw.startswith("<tool_call>") and calls[0].raw.endswith("</tool_call>")
    assert calls[0].id != calls[1].id and calls[1].id.endswith("_1")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('<tool_call>{"name": "calc", "arguments": {"expr": "1"}</tool_call>', "not valid JSON"),
        ('<tool_call>["calc"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
        (
            '<tool_call>{"name": "calc", "arguments": "{\\"expr\\": 1}"}</tool_call>',
            '"arguments" must be a JSON object',
        ),
        ('<tool_call>{"name": "calc", "arguments": {}, "id": 3}</tool_call>', "unexpected keys"),
        ('<tool_call>{"name": "calc", "arguments": {}}', "is not closed"),
        ('{"name": "calc"}</tool_call>', "without a matching"),
    ],
)
def test_hermes_rejects_malformed_calls_without_repair(text: str, reason: str) -> None:
    calls = hermes(text)
    assert len(calls) == 1
    assert calls[0].is_error and reason in (calls[0].error or "")
    assert calls[0].input == {}


def test_hermes_keeps_the_name_of_a_call_with_bad_arguments() -> None:
    [call] = hermes('<tool_call>{"name": "calc", "arguments": [1]}</tool_call>')
    assert call.name == "calc" and call.is_error


def test_unclosed_call_followed_by_valid_call() -> None:
    calls = hermes('<tool_call>{"name": "a"\n<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert [c.is_error for c in calls] == [True, False]
    assert calls[1].name == "b"


@pytest.mark.parametrize(
    "text",
    [
        '<think>maybe <tool_call>{"name": "rm", "arguments": {}}</tool_call></think>Done.',
        # The generation prompt opened the block, so only the closing tag is in the output.
        'draft <tool_call>{"name": "rm", "arguments": {}}</tool_call>\n</think>\n\nDone.',
        # Unclosed think block: still drafting, nothing is executable.
        'Sure. <think>I could <tool_call>{"name": "rm", "arguments": {}}</tool_call>',
    ],
)
def test_calls_drafted_in_reasoning_are_not_executed(text: str) -> None:
    assert hermes(text) == []


def test_call_after_reasoning_is_executed() -> None:
    calls = hermes('<think>plan</think>\n<tool_call>{"name": "calc", "arguments": {"expr": "2"}}</tool_call>')
    assert [c.name for c in calls] == ["calc"]


def test_qwen_xml_uses_schema_types() -> None:
    text = (
        "<tool_call>\n<function=calc>\n<parameter=expr>\n25 * 17\n</parameter>\n"
        "<parameter=n>\n42\n</parameter>\n</function>\n</tool_call>"
    )
    [call] = QwenXMLToolParser().parse(text, [CALC_SPEC])  # type: ignore[list-item]
    assert call.error is None and call.name == "calc" and call.input == {"expr": "25 * 17", "n": 42}
    # A string parameter stays a string even when it looks like JSON.
    [call] = QwenXMLToolParser().parse(text.replace("25 * 17", "7"), [CALC_SPEC])  # type: ignore[list-item]
    assert call.input["expr"] == "7"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<tool_call>\ncalc\n</tool_call>", "<function=NAME>"),
        ("<tool_call><function=calc><parameter=a>1</parameter>junk</function></tool_call>", "unexpected text"),
        (
            "<tool_call><function=calc><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",
            "twice",
        ),
        ("<tool_call><function=calc><parameter=a>1</parameter></function>", "is not closed"),
    ],
)
def test_qwen_xml_rejects_malformed_calls(text: str, reason: str) -> None:
    [call] = QwenXMLToolParser().parse(text)
    assert call.is_error and reason in (call.error or "")


def test_registry() -> None:
    assert isinstance(get_tool_parser("hermes"), HermesToolParser)
    assert isinstance(get_tool_parser("qwen_xml"), QwenXMLToolParser)
    with pytest.raises(ValueError, match="unknown tool parser"):
        get_tool_parser("nope")
