#!/usr/bin/env python
"""Train the tiny 4096-token BPE committed at ``src/strands_tito/testing/data/tiny_tokenizer``.

Same text pipeline as the Qwen3 tokenizer (NFC, Qwen split regex + byte-level), trained on the top-level ``.py``
modules of the running interpreter's standard library.  ChatML control tokens are added as special tokens
(ids 4096..4098) and the tool/think markers as non-special tokens (ids 4099..4104).

Usage::

    python scripts/build_tiny_tokenizer.py [--output DIR]

The result depends on the CPython version whose standard library is used for training (the committed copy was
built with Python 3.12); regenerate it only when you mean to change it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, pre_tokenizers, trainers
from tokenizers.models import BPE

from strands_tito.testing.tokenizers import (
    TINY_NON_SPECIAL_TOKENS,
    TINY_SPECIAL_TOKENS,
    configure_byte_level_pipeline,
    wrap_tokenizer,
)

VOCAB_SIZE = 4096
MIN_FREQUENCY = 2
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "src" / "strands_tito" / "testing" / "data" / "tiny_tokenizer"


def stdlib_sources() -> list[Path]:
    """Top-level ``.py`` modules of the running interpreter's standard library, sorted by name."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    if not files:
        raise SystemExit(f"no .py files found in {stdlib}")
    return files


def iter_texts(files: list[Path]) -> Iterator[str]:
    """Yield each file's text (undecodable bytes replaced)."""
    for path in files:
        yield path.read_text(encoding="utf-8", errors="replace")


def train(files: list[Path]) -> Tokenizer:
    """Train the BPE and add the ChatML/tool tokens."""
    tokenizer = configure_byte_level_pipeline(Tokenizer(BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(iter_texts(files), trainer=trainer, length=len(files))
    base = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in TINY_SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TINY_NON_SPECIAL_TOKENS])
    for offset, token in enumerate((*TINY_SPECIAL_TOKENS, *TINY_NON_SPECIAL_TOKENS)):
        if tokenizer.token_to_id(token) != base + offset:
            raise SystemExit(f"{token!r} did not land at id {base + offset}")
    return tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"output directory ({DEFAULT_OUTPUT})")
    args = parser.parse_args(argv)
    output: Path = args.output.resolve()

    files = stdlib_sources()
    tokenizer = wrap_tokenizer(train(files), model_max_length=32768)

    # Write into a temp dir first so a failed run never leaves a half-written package data directory.
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tiny_tokenizer-", dir=output.parent) as tmp:
        tokenizer.save_pretrained(tmp)
        if output.exists():
            shutil.rmtree(output)
        shutil.copytree(tmp, output)

    size = sum(p.stat().st_size for p in output.iterdir())
    print(
        f"trained on {len(files)} stdlib modules of Python {sys.version.split()[0]}; "
        f"{len(tokenizer)} tokens; wrote {size / 1024:.0f} KiB to {output}"
    )
    for path in sorted(output.iterdir()):
        print(f"  {path.name}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
