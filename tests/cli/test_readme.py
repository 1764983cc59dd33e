"""The README's quick start runs offline as written, and the docs cite only files that exist.

The quick start is taken from the README itself: its engine command is run as written (on a free port instead of
30000) and its program is run unchanged except for that URL, twice, with the model hub switched off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strands_tito.testing.engine import ScriptFile
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _offline_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "STRANDS_TITO_CAPTURE": "0"}


@pytest.fixture
def quickstart_engine(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The quick start's engine command, as the README writes it, on a free port; yields its URL and record file."""
    section = _section(README.read_text(encoding="utf-8"), "Quick start")
    (command,) = [line for line in _blocks(section, "bash")[0].splitlines() if line.strip()]
    assert command.startswith("strands-tito engine ") and "--port 30000" in command
    record = tmp_path / "engine.jsonl"
    argv = [*command.replace("--port 30000", "--port 0").split()[1:], "--record", str(record)]
    engine = subprocess.Popen(
        [sys.executable, "-m", "strands_tito.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_offline_env(),
    )
    try:
        assert engine.stdout is not None
        seen = []
        while not (match := re.search(r"listening on (http://\S+)", line := engine.stdout.readline())):
            seen.append(line)
            assert line, f"engine did not start: {''.join(seen)}"
        yield match.group(1), record
    finally:
        engine.terminate()
        engine.wait(30)


@pytest.mark.slow
def test_the_quick_start_runs_offline_as_written(quickstart_engine: tuple[str, Path], tmp_path: Path) -> None:
    url, record = quickstart_engine
    section = _section(README.read_text(encoding="utf-8"), "Quick start")
    program = _blocks(section, "python")[0]
    assert program.count("http://127.0.0.1:30000") == 1
    script = tmp_path / "quickstart.py"
    script.write_text(program.replace("http://127.0.0.1:30000", url), encoding="utf-8")

    tokenizer = build_qwen3_tokenizer()
    for run in range(2):  # run again against the same engine: the shipped script serves every conversation
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=_offline_env(), cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout + done.stderr
        printed = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
        assert "425" in printed["answer"]
        records = [json.loads(line) for line in record.read_text().splitlines()]
        calls = [r for r in records if r["path"] == "/generate" and r["status"] == 200]
        assert len(calls) == 2 * (run + 1)
        first, last = calls[-2:]
        assert first["conversation"] == last["conversation"] == run
        assert "<tool_call>" in tokenizer.decode(first["output_ids"])
        # The real multiply tool ran: its result is in the prompt of the second call.
        assert "<tool_response>\n425\n</tool_response>" in tokenizer.decode(last["input_ids"])
        tokens = int(printed["tokens"].split()[0])
        assert tokens == len(last["input_ids"]) + len(last["output_ids"])
        assert printed["to train on"].startswith(f"{len(first['output_ids']) + len(last['output_ids'])} tokens")


def test_the_engine_doc_script_is_a_valid_script_file() -> None:
    text = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    (example,) = _blocks(text, "json")
    script_file = ScriptFile.from_dict(json.loads(example))
    assert [len(script.turns) for script in script_file.scripts] == [3]


def _cited_files(path: Path) -> Iterator[str]:
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target) and not target.startswith("/"):
            yield target
    # Markdown files named in prose or code spans, not only links.
    yield from (name for name in re.findall(r"[\w./-]+\.md\b", text) if "://" not in name and not name.startswith("/"))


@pytest.mark.parametrize("doc", [README, ROOT / "BENCHMARKS.md", *DOCS], ids=lambda p: p.name)
def test_docs_cite_only_files_in_the_repository(doc: Path) -> None:
    missing = []
    for cited in _cited_files(doc):
        candidates = [doc.parent / cited, ROOT / cited, ROOT / "docs" / cited]
        if not any(candidate.exists() for candidate in candidates):
            missing.append(cited)
    assert not missing, f"{doc.name} cites files that are not in the repository: {sorted(set(missing))}"


def test_code_cites_only_markdown_files_in_the_repository() -> None:
    missing = []
    # The repository's own files only: a benchmark's peer virtualenv or a build folder is not ours to check.
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    folders = ("core", "src", "collector", "exporters", "tests", "scripts", "benchmarks", "examples")
    for source in (ROOT / name for name in tracked.stdout.splitlines() if name.startswith(folders)):
        if source.exists():
            for name in re.findall(r"[\w./-]*[\w-]\.md\b", source.read_text(encoding="utf-8")):
                if Path(name).stem.isupper():  # a placeholder such as FILE.md
                    continue
                if not any((base / name).exists() for base in (ROOT, ROOT / "docs", source.parent)):
                    missing.append(f"{source.relative_to(ROOT)}: {name}")
    assert not missing, missing


def _repository_texts() -> Iterator[tuple[str, str]]:
    """``(name, text)`` of the docs and the repository's own Python files (what a reader follows references in)."""
    for doc in [README, ROOT / "BENCHMARKS.md", *DOCS]:
        yield doc.name, doc.read_text(encoding="utf-8")
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in tracked.stdout.splitlines():
        if (ROOT / name).exists():
            yield name, (ROOT / name).read_text(encoding="utf-8")


#: Modules of other programs that the docs tell a reader to run (not installed here).
FOREIGN_MODULES = {"sglang.launch_server", "vllm.entrypoints.openai.api_server"}


def test_every_python_m_command_names_a_module_that_exists() -> None:
    missing = []
    for name, text in _repository_texts():
        for module in re.findall(r"python3? -m ([A-Za-z_][\w.]*\w)", text):
            if module in FOREIGN_MODULES or module.split(".")[0] in {"pip", "venv", "pytest", "http"}:
                continue
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                missing.append(f"{name}: python -m {module}")
    assert not missing, missing


def test_every_cited_readme_section_exists() -> None:
    headings = set(re.findall(r"^#+ (.+?)\s*$", README.read_text(encoding="utf-8"), re.MULTILINE))
    citation = re.compile(r"README \x22([^\x22]+)\x22")  # README, a space, a quoted heading
    cited = [(name, section) for name, text in _repository_texts() for section in citation.findall(text)]
    assert not [c for c in cited if c[1] not in headings], cited
