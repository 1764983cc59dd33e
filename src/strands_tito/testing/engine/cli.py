"""Command line for the local test/dev engine: ``strands-tito engine`` / ``python -m strands_tito.testing.engine
[options]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

from strands_tito.testing.engine.script import ScriptFile

if TYPE_CHECKING:
    from strands_tito.providers.families import Family
    from strands_tito.testing.engine.core import Speculative

__all__ = ["build_parser", "engine_main"]


def build_parser() -> argparse.ArgumentParser:
    """The engine's argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m strands_tito.testing.engine",
        description=(
            "Run the strands-tito local test/dev engine: a stand-in for an SGLang (or vLLM / OpenAI-compatible) server "
            "that replays scripted replies, injects faults and records every request. It runs no model and needs no "
            "GPU; it is for tests, demos and benchmarks, not a production server."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=30000, help="port; 0 picks a free one (default: %(default)s)")
    parser.add_argument(
        "--tokenizer", default="qwen3", help='"qwen3", "tiny" or a local tokenizer directory (default: %(default)s)'
    )
    parser.add_argument(
        "--chat-template",
        metavar="FAMILY",
        default=None,
        help="serve a model family on its real chat template with the stand-in tokenizer (Qwen3 vocabulary plus the "
        "family's special tokens) and its stop tokens, e.g. glm-4.6, llama-3.1 "
        "(names in strands_tito.providers.families)",
    )
    parser.add_argument(
        "--script",
        metavar="FILE.json",
        help='what the engine answers: a JSON script file (format: docs/engine.md) or "quickstart", the shipped script '
        "of the README's quick start (a multiply call, then the answer, for every conversation); without one every "
        'request gets "OK."',
    )
    parser.add_argument("--context-length", type=int, default=32768, help="model context length (default: %(default)s)")
    parser.add_argument(
        "--model-path", default="strands-tito/local-engine", help="served model name (default: %(default)s)"
    )
    parser.add_argument(
        "--enable-return-routed-experts", action="store_true", help="emulate an MoE model that reports routed experts"
    )
    # Defaults are Qwen3-30B-A3B's shape.
    parser.add_argument("--num-layers", type=int, default=48, help="MoE layers (default: %(default)s)")
    parser.add_argument("--num-experts-per-tok", type=int, default=8, help="experts per token (default: %(default)s)")
    parser.add_argument("--num-experts", type=int, default=128, help="experts per layer (default: %(default)s)")
    parser.add_argument("--record", metavar="FILE.jsonl", help="append every request/response record to this file")
    parser.add_argument(
        "--openai-flavor",
        choices=["vllm", "sglang"],
        default="vllm",
        help="token-id fields of /v1/chat/completions: vLLM's or SGLang's (default: %(default)s)",
    )
    parser.add_argument(
        "--reasoning-parser", choices=["qwen3"], default=None, help="split <think>...</think> off chat replies"
    )
    parser.add_argument(
        "--image-understanding",
        action="store_true",
        help="report has_image_understanding on /model_info and accept image_data (one <|image_pad|> per image)",
    )
    _add_sglang_arguments(parser)
    return parser


def _add_sglang_arguments(parser: argparse.ArgumentParser) -> None:
    """Weight version and speculative decoding, under SGLang's own flag names (``srt/arg_groups/fields/
    serving.py:172-175`` and the speculative arguments)."""
    parser.add_argument(
        "--weight-version", default="default", help="weights' version replies report (default: %(default)s)"
    )
    parser.add_argument(
        "--speculative-algorithm",
        default=None,
        help="emulate speculative decoding (EAGLE, EAGLE3, FROZEN_KV_MTP, NEXTN reserve context per request)",
    )
    parser.add_argument("--speculative-eagle-topk", type=int, default=1)
    parser.add_argument("--speculative-num-steps", type=int, default=3)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=4)


def _speculative(args: argparse.Namespace) -> Speculative | None:
    from strands_tito.testing.engine.core import Speculative

    if not args.speculative_algorithm:
        return None
    return Speculative(
        args.speculative_algorithm,
        args.speculative_eagle_topk,
        args.speculative_num_steps,
        args.speculative_num_draft_tokens,
    )


def _tokenizer(name: str, spec: Family | None) -> tuple[PreTrainedTokenizerBase, list[int] | None]:
    """The tokenizer to serve and its stop ids (None: the tokenizer's eos)."""
    if spec is not None:
        from strands_tito.testing.family_tokenizers import family_tokenizer

        tokenizer = family_tokenizer(spec.name)
        return tokenizer, [tokenizer.convert_tokens_to_ids(t) for t in spec.stop_tokens]  # type: ignore[misc]
    from strands_tito.testing.tokenizers import load_tokenizer

    return load_tokenizer(name), None


def engine_main(argv: list[str] | None = None) -> int:
    """Run the engine until SIGINT/SIGTERM; prints ``strands-tito engine listening on http://HOST:PORT`` when ready."""
    args = build_parser().parse_args(argv)

    from strands_tito.testing.engine.server import LocalEngine

    try:
        script_file = ScriptFile.load(args.script) if args.script else ScriptFile()
    except (OSError, ValueError) as exc:
        print(f"error: cannot load script {args.script}: {exc}", file=sys.stderr)
        return 2
    spec: Family | None = None
    if args.chat_template:
        from strands_tito.providers.families import family

        try:
            spec = family(args.chat_template)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    tokenizer, eos_token_ids = _tokenizer(args.tokenizer, spec)
    routed = (
        (args.num_layers, args.num_experts_per_tok, args.num_experts) if args.enable_return_routed_experts else None
    )
    engine = LocalEngine(
        tokenizer,
        script_file.scripts,
        script_file.default,
        context_length=args.context_length,
        model_path=args.model_path,
        routed_experts=routed,
        host=args.host,
        port=args.port,
        record_path=args.record,
        openai_flavor=args.openai_flavor,
        reasoning_parser=args.reasoning_parser,
        image_understanding=args.image_understanding,
        eos_token_ids=eos_token_ids,
        weight_version=args.weight_version,
        speculative=_speculative(args),
    )

    def ready(running: LocalEngine) -> None:
        print(f"strands-tito engine listening on {running.base_url}", flush=True)

    async def main() -> None:
        task = asyncio.ensure_future(engine.serve(on_ready=ready))
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
