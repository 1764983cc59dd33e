"""The README's quick start runs offline as written, and the docs cite only files that exist.

The quick start is taken from the README itself: its engine command is run as written (on a free port instead of
30000) and its program is run unchanged except for that URL, twice, with the model hub switched off.
"""

from __future__ import annotations

import ast
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
        printed = _printed(done.stdout)
        assert "425" in printed["answer"]
        records = [json.loads(line) for line in record.read_text().splitlines()]
        calls = [r for r in records if r["path"] == "/generate" and r["status"] == 200]
        assert len(calls) == 2 * (run + 1)
        first, last = calls[-2:]
        assert first["conversation"] == last["conversation"] == run
        assert "<tool_call>" in tokenizer.decode(first["output_ids"])
        # The real multiply tool ran: its result is in the prompt of the second call.
        assert "<tool_response>\n425\n</tool_response>" in tokenizer.decode(last["input_ids"])
        # The token sequence it promises: everything the engine received and produced, the mask on the outputs.
        token_ids = ast.literal_eval(printed["token ids"])
        assert token_ids == last["input_ids"] + last["output_ids"]
        mask = ast.literal_eval(printed["loss mask"])
        assert len(mask) == len(token_ids) and sum(mask) == len(first["output_ids"]) + len(last["output_ids"])
        # ... and decoded segment by segment: input, the call, the tool result, the answer.
        segments = _segments(done.stdout)
        assert [kind for kind, _, _ in segments] == ["input", "model output", "input", "model output"]
        assert "".join(text for _, _, text in segments) == tokenizer.decode(token_ids)
        assert sum(length for kind, length, _ in segments if kind == "model output") == sum(mask)
        assert segments[1][2].startswith("<tool_call>") and "425" in segments[3][2]
        assert printed["finish reasons"] == "['stop', 'stop']"

    # Saving the trajectory: the README's commands, the same program with capture switched on by the variable.
    save, look = (line for line in _blocks(section, "bash")[1].splitlines() if line.strip())
    assert "STRANDS_TITO_CAPTURE=jsonl:" in save and save.split("#")[0].split()[-2:] == ["python", "quickstart.py"]
    saved = _shell(save, tmp_path)
    assert "425" in _printed(saved.stdout)["answer"]
    calls = [r for r in (json.loads(line) for line in record.read_text().splitlines()) if r["path"] == "/generate"]
    [trajectory] = [json.loads(line) for line in (tmp_path / "quickstart.jsonl").read_text().splitlines()]
    assert trajectory["complete"] is True, trajectory["reason"]
    assert trajectory["token_ids"] == ast.literal_eval(_printed(saved.stdout)["token ids"])
    assert trajectory["token_ids"] == calls[-1]["input_ids"] + calls[-1]["output_ids"]
    assert "425" in _shell(look, tmp_path).stdout


def _printed(stdout: str) -> dict[str, str]:
    """The quick start's labelled lines (``answer: ...``, ``token ids: [...]``)."""
    labels = ("answer", "token ids", "loss mask", "finish reasons")
    return {label: line.split(": ", 1)[1] for line in stdout.splitlines() for label in labels if line.startswith(label)}


def _segments(stdout: str) -> list[tuple[str, int, str]]:
    """The decoded segments the quick start prints: (kind, length, text), each text as printed (print's newline off)."""
    parts = re.split(r"^--- (input|model output), loss mask [01]: (\d+) tokens ---\n", stdout, flags=re.M)
    texts = parts[3::3]
    texts[-1] = texts[-1][: texts[-1].rindex("finish reasons: ")]
    return [
        (kind, int(length), text.removesuffix("\n"))
        for kind, length, text in zip(parts[1::3], parts[2::3], texts, strict=True)
    ]


def _shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A README command line, run as a user's shell runs it, with this environment's commands first on PATH."""
    env = _offline_env()
    env.pop("STRANDS_TITO_CAPTURE")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


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
