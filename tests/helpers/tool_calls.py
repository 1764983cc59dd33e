"""One well-formed call to ``calc(expr="1")`` in each tool-call format, and the markers around them: the rows of
the strict parsing table and the parser-choice tests start from these."""

H_OK = '<tool_call>\n{"name": "calc", "arguments": {"expr": "1"}}\n</tool_call>'
Q_OK = "<tool_call>\n<function=calc>\n<parameter=expr>\n1\n</parameter>\n</function>\n</tool_call>"
G_OK = "<tool_call>calc\n<arg_key>expr</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"
KB, KE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CALL = '<|tool_call_begin|>functions.calc:0<|tool_call_argument_begin|>{"expr": "1"}<|tool_call_end|>'
DB, DE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
D_CALL = '<｜tool▁call▁begin｜>calc<｜tool▁sep｜>{"expr": "1"}<｜tool▁call▁end｜>'
O_CALL = ' to=functions.calc<|channel|>commentary json<|message|>{"expr": "1"}'
L_OK = '{"name": "calc", "parameters": {"expr": "1"}}'
M_OK = (
    '<minimax:tool_call>\n<invoke name="calc">\n<parameter name="expr">1</parameter>\n</invoke>\n</minimax:tool_call>'
)

DSML = "｜DSML｜"
V32_OK = (
    f'<{DSML}function_calls>\n<{DSML}invoke name="calc">\n<{DSML}parameter name="expr" string="true">1'
    f"</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}function_calls>"
)
V4_OK = V32_OK.replace("function_calls>", "tool_calls>")
MI_OK = '[TOOL_CALLS]calc[ARGS]{"expr": "1"}'
S_OK = "<seed:tool_call>\n<function=calc>\n<parameter=expr>1</parameter>\n</function>\n</seed:tool_call>"
