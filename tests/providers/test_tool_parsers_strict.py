"""Every format's malformed variants, table-driven: each becomes an error with its reason, never a repaired call.

A row is ``(parser, output text, expected calls)``; an expected call is the substring its error must contain, or None
for a valid call. Truncation at ``max_new_tokens`` is an output cut inside a call.
"""

from __future__ import annotations

from typing import Any

import pytest

from strands_tito.providers.tool_parsers import get_tool_parser

from ..helpers.tool_calls import (
    D_CALL,
    DB,
    DE,
    DSML,
    G_OK,
    H_OK,
    K_CALL,
    KB,
    KE,
    L_OK,
    M_OK,
    MI_OK,
    O_CALL,
    Q_OK,
    S_OK,
    V4_OK,
    V32_OK,
)

SPECS: list[Any] = [
    {
        "name": "calc",
        "description": "evaluate",
        "inputSchema": {
            "json": {"type": "object", "properties": {"expr": {"type": "string"}, "n": {"type": "integer"}}}
        },
    },
    {
        "name": "strict",
        "description": "no extras",
        "inputSchema": {
            "json": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
        },
    },
]

ROWS: list[tuple[str, str, list[str | None]]] = [
    # -- hermes ---------------------------------------------------------------------------------------------------
    ("hermes", H_OK, [None]),
    ("hermes", '<tool_call>{"name": "calc", "arguments": {"expr": "1"}</tool_call>', ["not valid JSON"]),
    ("hermes", '<tool_call>{"name": "calc", "arguments": {"n": NaN}}</tool_call>', ["not valid JSON"]),
    ("hermes", '<tool_call>{"name": "calc", "arguments": {"n": 1, "n": 2}}</tool_call>', ["duplicate key 'n'"]),
    ("hermes", '<tool_call>{"name": "calc", "arguments": [1]}</tool_call>', ['"arguments" must be a JSON object']),
    ("hermes", '<tool_call>{"name": 3, "arguments": {}}</tool_call>', ['no "name" string']),
    ("hermes", '<tool_call>{"name": "nope", "arguments": {}}</tool_call>', ["unknown tool 'nope'"]),
    (
        "hermes",
        '<tool_call>{"name": "strict", "arguments": {"a": 1, "b": 2}}</tool_call>',
        ["unknown parameters ['b']"],
    ),
    ("hermes", '<tool_call>{"name": "calc", "arguments": {}}{"name": "calc", "arguments": {}}</tool_call>', ["JSON"]),
    ("hermes", '<tool_call>\n{"name": "calc", "argum', ["is not closed"]),
    ("hermes", H_OK + "<|im_end|>" + H_OK, [None, "after the end-of-turn token '<|im_end|>'"]),
    ("hermes", "Done.<|im_end|>trailing prose", []),
    ("hermes", "<think>\nmaybe " + H_OK, []),
    # -- qwen_xml -------------------------------------------------------------------------------------------------
    ("qwen_xml", Q_OK, [None]),
    (
        "qwen_xml",
        "<tool_call>\n<function=calc>\n<parameter=expr>\n1\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>",
        ["<parameter=expr> is not closed"],
    ),
    ("qwen_xml", Q_OK.replace("</function>", "<parameter=expr>\n2\n</parameter>\n</function>"), ["given twice"]),
    ("qwen_xml", Q_OK.replace("calc", "nope"), ["unknown tool 'nope'"]),
    (
        "qwen_xml",
        "<tool_call>\n<function=strict>\n<parameter=b>\n1\n</parameter>\n</function>\n</tool_call>",
        ["unknown parameters"],
    ),
    ("qwen_xml", "<tool_call>\ncalc\n</tool_call>", ["<function=NAME>"]),
    ("qwen_xml", "<tool_call>\n<function=calc>\n<parameter=expr>\n1\n</parameter>\n</tool_call>", ["</function>"]),
    ("qwen_xml", Q_OK.replace("</function>", "</function>\n<function=calc>\n</function>"), ["exactly one"]),
    ("qwen_xml", Q_OK.replace("</function>", "junk\n</function>"), ["unexpected text"]),
    ("qwen_xml", "<tool_call>\n<function=calc>\n<parameter=expr>\n1", ["is not closed"]),
    ("qwen_xml", "<tool_call>\n<function=calc>\n<parameter=", ["is not closed"]),
    ("qwen_xml", Q_OK + "<|im_end|>" + Q_OK, [None, "after the end-of-turn"]),
    ("qwen_xml", "<think>\n" + Q_OK, []),
    # -- glm ------------------------------------------------------------------------------------------------------
    ("glm", G_OK, [None]),
    (
        "glm",
        "<tool_call>calc\n<arg_key>expr</arg_key>\n<arg_value>1\n<arg_key>n</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        ["<arg_value> of 'expr' is not closed"],
    ),
    ("glm", "<tool_call>calc\n<arg_key>expr</arg_key>\n</tool_call>", ["not followed by <arg_value>"]),
    ("glm", G_OK.replace("</tool_call>", "<arg_key>expr</arg_key><arg_value>2</arg_value></tool_call>"), ["twice"]),
    ("glm", "<tool_call><arg_key>expr</arg_key><arg_value>1</arg_value></tool_call>", ["no name"]),
    ("glm", "<tool_call>call calc\n<arg_key>expr</arg_key><arg_value>1</arg_value></tool_call>", ["whitespace"]),
    ("glm", G_OK.replace("calc", "nope"), ["unknown tool 'nope'"]),
    ("glm", "<tool_call>strict<arg_key>b</arg_key><arg_value>1</arg_value></tool_call>", ["unknown parameters"]),
    (
        "glm",
        G_OK.replace("</tool_call>", "calc\n<arg_key>n</arg_key><arg_value>2</arg_value></tool_call>"),
        ["unexpected text"],
    ),
    ("glm", "<tool_call>calc\n<arg_key>expr</arg_key>\n<arg_val", ["is not closed"]),
    ("glm", G_OK + "<|observation|>" + G_OK, [None, "after the end-of-turn token '<|observation|>'"]),
    ("glm", "</think>" + G_OK, [None]),
    ("glm", "<think>" + G_OK, []),
    # -- kimi_k2 --------------------------------------------------------------------------------------------------
    ("kimi_k2", KB + K_CALL + KE, [None]),
    ("kimi_k2", KB + K_CALL.replace('"1"}', '"1"') + KE, ["not valid JSON"]),
    ("kimi_k2", KB + K_CALL.replace('{"expr": "1"}', "[1]") + KE, ["must be a JSON object"]),
    ("kimi_k2", KB + K_CALL.replace('{"expr": "1"}', '{"n": 1, "n": 1}') + KE, ["duplicate key"]),
    ("kimi_k2", KB + K_CALL.replace("functions.calc:0", "calc:0") + KE, ["not functions.NAME:INDEX"]),
    ("kimi_k2", KB + K_CALL.replace("functions.calc:0", "functions.calc") + KE, ["not functions.NAME:INDEX"]),
    ("kimi_k2", KB + K_CALL.replace("calc", "nope") + KE, ["unknown tool 'nope'"]),
    ("kimi_k2", KB + K_CALL + K_CALL + KE, [None, "used twice"]),
    ("kimi_k2", KB + K_CALL.replace("<|tool_call_argument_begin|>", "") + KE, ["exactly one"]),
    ("kimi_k2", KB + K_CALL + "and then" + KE, [None, "unexpected text between calls"]),
    ("kimi_k2", KB + K_CALL[:-20], ["<|tool_calls_section_begin|> is not closed"]),
    ("kimi_k2", KB + K_CALL.replace("<|tool_call_end|>", "") + KE, ["<|tool_call_begin|> is not closed"]),
    ("kimi_k2", K_CALL, ["outside a <|tool_calls_section_begin|> section"]),
    ("kimi_k2", KB + K_CALL + KE + "<|im_end|>" + KB + K_CALL + KE, [None, "after the end-of-turn"]),
    ("kimi_k2", "<think>" + KB + K_CALL + KE, []),
    # -- deepseek_v31 ---------------------------------------------------------------------------------------------
    ("deepseek_v31", DB + D_CALL + DE, [None]),
    ("deepseek_v31", DB + D_CALL.replace("<｜tool▁sep｜>", "") + DE, ["exactly one"]),
    ("deepseek_v31", DB + D_CALL.replace("calc", "my calc") + DE, ["contains whitespace"]),
    ("deepseek_v31", DB + D_CALL.replace('"1"}', "1") + DE, ["not valid JSON"]),
    ("deepseek_v31", DB + D_CALL.replace('{"expr": "1"}', '"{}"') + DE, ["must be a JSON object, got str"]),
    ("deepseek_v31", DB + D_CALL.replace("calc", "nope") + DE, ["unknown tool 'nope'"]),
    ("deepseek_v31", DB + D_CALL + "x" + D_CALL + DE, [None, "unexpected text", None]),
    ("deepseek_v31", DB + D_CALL[:-10], ["is not closed"]),
    ("deepseek_v31", D_CALL, ["outside"]),
    ("deepseek_v31", DB + D_CALL + DE + "<｜end▁of▁sentence｜>" + DB + D_CALL + DE, [None, "after the end-of-turn"]),
    ("deepseek_v31", "thinking " + DB + D_CALL + DE + "</think>answer", []),
    # -- gpt_oss --------------------------------------------------------------------------------------------------
    ("gpt_oss", O_CALL, [None]),
    ("gpt_oss", "<|channel|>analysis<|message|>plan<|end|><|start|>assistant" + O_CALL + "<|call|>", [None]),
    ("gpt_oss", "<|channel|>commentary to=functions.calc <|constrain|>json<|message|>{}", [None]),
    ("gpt_oss", O_CALL[:-2], ["not valid JSON"]),
    ("gpt_oss", O_CALL.replace('{"expr": "1"}', "[]"), ["must be a JSON object"]),
    ("gpt_oss", O_CALL.replace('{"expr": "1"}', '{"n": 1, "n": 2}'), ["duplicate key"]),
    ("gpt_oss", O_CALL.replace("calc", "nope"), ["unknown tool 'nope'"]),
    ("gpt_oss", O_CALL.replace("commentary", "final"), ["commentary channel"]),
    ("gpt_oss", O_CALL.replace("functions.calc", "browser.search"), ["not functions.NAME"]),
    ("gpt_oss", O_CALL.replace("json", "<|constrain|>python"), ["content type must be json"]),
    ("gpt_oss", O_CALL + "<|end|>", ["must end the turn with <|call|>"]),
    ("gpt_oss", O_CALL + "<|start|>assistant" + O_CALL, ["must be the last message", None]),
    ("gpt_oss", " to=functions.calc<|channel|>commentary js", ["not closed by <|message|>"]),
    ("gpt_oss", O_CALL + "<|call|><|start|>assistant" + O_CALL, [None, "after the end-of-turn token '<|call|>'"]),
    ("gpt_oss", "<|channel|>analysis<|message|>maybe<|start|>assistant" + O_CALL, []),
    (
        "gpt_oss",
        "<|channel|>analysis to=functions.calc<|message|>{}<|end|><|start|>assistant<|channel|>final<|message|>ok",
        [],
    ),
    ("gpt_oss", "<|channel|>final<|message|>The answer is 4.", []),
    # -- llama3_json ----------------------------------------------------------------------------------------------
    ("llama3_json", L_OK, [None]),
    ("llama3_json", "<|python_tag|>" + L_OK, [None]),
    ("llama3_json", L_OK[:-5], ["not valid JSON"]),
    ("llama3_json", '{"name": "calc", "arguments": {}}', ['exactly the keys "name" and "parameters"']),
    ("llama3_json", '{"name": 3, "parameters": {}}', ['no "name" string']),
    ("llama3_json", '{"name": "calc", "parameters": "{}"}', ['"parameters" must be a JSON object']),
    ("llama3_json", '{"name": "calc", "parameters": {"n": 1, "n": 1}}', ["duplicate key"]),
    ("llama3_json", '{"name": "nope", "parameters": {}}', ["unknown tool 'nope'"]),
    ("llama3_json", '{"name": "strict", "parameters": {"b": 1}}', ["unknown parameters"]),
    ("llama3_json", L_OK + "; " + L_OK, ["not valid JSON"]),
    ("llama3_json", '<|python_tag|>brave_search.call(query="x")', ["only JSON calls"]),
    ("llama3_json", "Sure. <|python_tag|>" + L_OK, ["must start the output"]),
    ("llama3_json", L_OK + "<|eot_id|>" + L_OK, [None, "after the end-of-turn token '<|eot_id|>'"]),
    ("llama3_json", "The answer is 4.", []),
    ("llama3_json", 'Call it as {"name": "calc", "parameters": {}}.', []),
    # -- minimax_m2 -----------------------------------------------------------------------------------------------
    ("minimax_m2", M_OK, [None]),
    (
        "minimax_m2",
        M_OK.replace("1</parameter>", '1\n<parameter name="n">2</parameter>'),
        ['<parameter name="expr"> is not closed'],
    ),
    ("minimax_m2", M_OK.replace("</invoke>", '<parameter name="expr">2</parameter></invoke>'), ["given twice"]),
    ("minimax_m2", M_OK.replace(' name="calc"', ""), ['<invoke name="NAME">']),
    ("minimax_m2", M_OK.replace("calc", "nope"), ["unknown tool 'nope'"]),
    ("minimax_m2", M_OK.replace("</invoke>", "junk</invoke>"), ["unexpected text in <invoke>"]),
    ("minimax_m2", M_OK.replace("</invoke>\n</minimax:tool_call>", ""), ["is not closed"]),
    ("minimax_m2", M_OK.removeprefix("<minimax:tool_call>").removesuffix("</minimax:tool_call>"), ["outside"]),
    ("minimax_m2", M_OK + "[e~[" + M_OK, [None, "after the end-of-turn token '[e~['"]),
    ("minimax_m2", "drafting " + M_OK + "\n</think>\n\nDone.", []),
    # -- deepseek_v32 ---------------------------------------------------------------------------------------------
    ("deepseek_v32", V32_OK, [None]),
    ("deepseek_v32", "\n\n" + V32_OK + "\n" + V32_OK, [None, None]),
    (
        "deepseek_v32",
        V32_OK.replace(f'string="true">1</{DSML}parameter>', f'string="false">[1</{DSML}parameter>'),
        ["is not valid JSON"],
    ),
    ("deepseek_v32", V32_OK.replace('string="true">1', 'string="yes">1'), ['expected "true" or "false"']),
    (
        "deepseek_v32",
        V32_OK.replace(f"1</{DSML}parameter>", f'1<{DSML}parameter name="n" string="false">2</{DSML}parameter>'),
        ["'expr' is not closed"],
    ),
    (
        "deepseek_v32",
        V32_OK.replace(
            f"</{DSML}invoke>", f'<{DSML}parameter name="expr" string="true">2</{DSML}parameter></{DSML}invoke>'
        ),
        ["given twice"],
    ),
    ("deepseek_v32", V32_OK.replace(' name="calc"', ""), ['name="NAME"']),
    ("deepseek_v32", V32_OK.replace("calc", "nope"), ["unknown tool 'nope'"]),
    ("deepseek_v32", V32_OK.replace(f"</{DSML}invoke>", f"junk</{DSML}invoke>"), ["unexpected text in the call"]),
    ("deepseek_v32", V32_OK[:-30], ["is not closed"]),
    ("deepseek_v32", V32_OK.split("\n", 1)[1], ["outside"]),
    ("deepseek_v32", V32_OK + "<｜end▁of▁sentence｜>" + V32_OK, [None, "after the end-of-turn"]),
    ("deepseek_v32", "<think>" + V32_OK, []),
    ("deepseek_v32", V4_OK, ["outside"]),  # V4's section is not V3.2's
    # -- deepseek_v4 ----------------------------------------------------------------------------------------------
    ("deepseek_v4", V4_OK, [None]),
    ("deepseek_v4", V4_OK.replace('string="true">1', 'string="false">"1"'), [None]),
    ("deepseek_v4", V4_OK.replace('string="true">1', 'string="false">NaN'), ["is not valid JSON"]),
    ("deepseek_v4", V32_OK, ["outside"]),
    ("deepseek_v4", "thinking " + V4_OK + "</think>Done.", []),
    # -- mistral --------------------------------------------------------------------------------------------------
    ("mistral", MI_OK, [None]),
    ("mistral", "Let me compute." + MI_OK + MI_OK, [None, None]),
    ("mistral", "[TOOL_CALLS]calc[CALL_ID]a1B2c3D4e[ARGS]{}", [None]),
    ("mistral", "[TOOL_CALLS]calc[CALL_ID]short[ARGS]{}", ["not nine letters or digits"]),
    (
        "mistral",
        "[TOOL_CALLS]calc[CALL_ID]a1B2c3D4e[ARGS]{}[TOOL_CALLS]calc[CALL_ID]a1B2c3D4e[ARGS]{}",
        [None, "used twice"],
    ),
    ("mistral", "[TOOL_CALLS]calc{}", ["exactly one [ARGS]"]),
    ("mistral", "[TOOL_CALLS]calc[ARGS]{}[ARGS]{}", ["exactly one [ARGS]"]),
    ("mistral", "[TOOL_CALLS]my calc[ARGS]{}", ["whitespace"]),
    ("mistral", "[TOOL_CALLS][ARGS]{}", ["is empty"]),
    ("mistral", '[TOOL_CALLS]calc[ARGS]{"expr": "1"', ["not valid JSON"]),
    ("mistral", '[TOOL_CALLS]calc[ARGS]{"expr": "1"} and more', ["not valid JSON"]),
    ("mistral", "[TOOL_CALLS]calc[ARGS][1]", ["must be a JSON object"]),
    ("mistral", '[TOOL_CALLS]calc[ARGS]{"n": 1, "n": 2}', ["duplicate key"]),
    ("mistral", "[TOOL_CALLS]nope[ARGS]{}", ["unknown tool 'nope'"]),
    ("mistral", '[TOOL_CALLS]strict[ARGS]{"b": 1}', ["unknown parameters"]),
    ("mistral", 'calc[ARGS]{"expr": "1"}', ["[ARGS] outside a [TOOL_CALLS] call"]),
    ("mistral", MI_OK + "</s>" + MI_OK, [None, "after the end-of-turn token '</s>'"]),
    ("mistral", "[THINK]maybe " + MI_OK + "[/THINK]The answer is 1.", []),
    ("mistral", "[THINK]maybe " + MI_OK, []),
    # -- seed_oss -------------------------------------------------------------------------------------------------
    ("seed_oss", S_OK, [None]),
    ("seed_oss", S_OK.replace("1</parameter>", "1\n<parameter=n>2</parameter>"), ["<parameter=expr> is not closed"]),
    ("seed_oss", S_OK.replace("</function>", "<parameter=expr>2</parameter>\n</function>"), ["given twice"]),
    ("seed_oss", S_OK.replace("calc", "nope"), ["unknown tool 'nope'"]),
    ("seed_oss", "<seed:tool_call>\ncalc\n</seed:tool_call>", ["<function=NAME>"]),
    ("seed_oss", S_OK.replace("\n</function>", ""), ["</function>"]),
    ("seed_oss", S_OK.replace("</function>", "junk\n</function>"), ["unexpected text"]),
    ("seed_oss", S_OK[:-25], ["is not closed"]),
    ("seed_oss", S_OK + "<seed:eos>" + S_OK, [None, "after the end-of-turn token '<seed:eos>'"]),
    ("seed_oss", "<seed:think>maybe " + S_OK + "</seed:think>Done.", []),
    ("seed_oss", "<seed:think>maybe " + S_OK, []),
    ("seed_oss", Q_OK, []),  # Qwen's tags are not Seed's
]


@pytest.mark.parametrize(("parser", "text", "expected"), ROWS)
def test_strict_parsing_table(parser: str, text: str, expected: list[str | None]) -> None:
    calls = get_tool_parser(parser).parse(text, SPECS)
    assert [c.error is None for c in calls] == [e is None for e in expected], [c.error for c in calls]
    for call, reason in zip(calls, expected, strict=True):
        if reason is None:
            assert call.name == "calc" and call.raw
            continue
        assert reason in (call.error or ""), call.error
        assert call.input == {}, "a malformed call carries no arguments"
        assert call.raw, "the model is shown the raw text of its malformed call"


@pytest.mark.parametrize("parser", sorted({row[0] for row in ROWS}))
def test_every_strict_prefix_of_a_call_is_an_error_or_nothing(parser: str) -> None:
    """Truncation at max_new_tokens anywhere inside a call never yields a different valid call."""
    full = next(text for name, text, expected in ROWS if name == parser and expected == [None])
    [whole] = get_tool_parser(parser).parse(full, SPECS)
    for cut in range(len(full)):
        for call in get_tool_parser(parser).parse(full[:cut], SPECS):
            # Formats whose call ends at the stop token (gpt-oss, Llama) cannot tell a cut after the last brace
            # from a trimmed stop; the provider reports max_tokens then, and Strands runs no tool.
            assert call.is_error or call.input == whole.input, (cut, call)


def test_errors_have_unique_ids() -> None:
    calls = get_tool_parser("kimi_k2").parse(KB + K_CALL + K_CALL + K_CALL + KE, SPECS)
    assert len({c.id for c in calls}) == 3
    assert calls[0].id == "functions.calc:0"
