"""The agent side's settings: one object, read once; the docs' table is its own; deprecated names still work."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from strands_tito import settings as settings_module
from strands_tito.settings import CaptureConfigError, Settings, get_settings, reload_settings, variable
from strands_tito.testing.engine import Reply, Script

from ..helpers.agents import calculator, make_agent, make_model

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = [ROOT / "src", ROOT / "core", ROOT / "collector", ROOT / "exporters"]
VARIABLE = re.compile(r"STRANDS_TITO_[A-Z_]+")
#: Modules allowed to name a variable: each side's settings (the agent side's module; the collector's config, which
#: declares its two environment fallbacks), and the interpreter start-up hook, whose first check (is the variable set
#: at all?) must run before it imports anything.
READERS = {
    ROOT / "src" / "strands_tito" / "settings.py",
    ROOT / "collector" / "strands_tito" / "collector" / "config.py",
    ROOT / "src" / "strands_tito_startup.py",
}


def test_the_docs_table_is_the_settings_own() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert settings_module.markdown_table() in doc
    documented = set(re.findall(r"^\| `(STRANDS_TITO_[A-Z_]+|AGL_EVENT_URL)` \|", doc, re.MULTILINE))
    assert documented == {variable(item.name).name for item in fields(Settings)}


def test_reading_the_settings_loads_no_framework() -> None:
    """The interpreter start-up hook reads them in every process that sets a variable: they must stay light."""
    probe = (
        "import sys, strands_tito.settings as s; s.get_settings(); "
        "print(sorted(m for m in sys.modules if m.startswith(('strands.', 'opentelemetry', 'transformers', "
        "'strands_tito.capture', 'strands_tito.providers'))))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (ROOT / "src", ROOT / "core"))},
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_each_documented_default_is_the_default() -> None:
    defaults = Settings()
    for item in fields(Settings):
        var = variable(item.name)
        assert var.meaning and var.name.startswith(("STRANDS_TITO_", "AGL_"))
        if var.default.startswith(("(", "~")):  # unset, or a path under the home directory
            assert getattr(defaults, item.name) in ("", None), item.name
            continue
        read = Settings.from_environ({var.name: var.default})
        assert getattr(read, item.name) == getattr(defaults, item.name), item.name


def _string_constants(tree: ast.AST) -> Iterator[tuple[int, str]]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _environment_reads(tree: ast.AST) -> Iterator[tuple[int, ast.expr]]:
    """The key of every ``os.environ[...]``, ``<something environ>.get(...)`` and ``os.getenv(...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value):
            yield node.lineno, node.slice
        elif isinstance(node, ast.Call) and node.args:
            name = ast.unparse(node.func)
            if name.endswith("getenv") or (name.endswith(".get") and "env" in name.rsplit(".", 1)[0].lower()):
                yield node.lineno, node.args[0]


def test_no_other_module_reads_a_strands_tito_variable() -> None:
    found = []
    for root in SOURCE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            if path in READERS:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            # No variable named as a literal (message text that mentions one is fine) ...
            found += [f"{path}:{line}: {value}" for line, value in _string_constants(tree) if VARIABLE.fullmatch(value)]
            # ... and none read through a name for one (the ENV_* constants are for messages and tests).
            for line, key in _environment_reads(tree):
                text = ast.unparse(key)
                if VARIABLE.search(text) or re.search(r"\bENV_[A-Z_]+", text):
                    found.append(f"{path}:{line}: reads {text}")
    assert found == []


def test_the_collector_reads_its_options_once_and_the_docs_table_is_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strands_tito.collector import CollectorConfig
    from strands_tito.collector.cli import COMMAND_ONLY, options_table, parse_args
    from strands_tito.collector.config import declared_options

    assert options_table() in (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    declared = {item.name: option for item, option in declared_options()}
    assert {o.environment for o in declared.values() if o.environment} == {"STRANDS_TITO_COLLECTOR_TOKEN", "AGL_KEY"}
    # The options the command offers are those the fields declare (the few it parses itself included) and its own.
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    offered = set(re.findall(r"^ {2}(--[a-z-]+)", capsys.readouterr().out, re.MULTILINE))
    assert offered == {flag for option in declared.values() for flag in option.flags} | COMMAND_ONLY
    monkeypatch.setenv("STRANDS_TITO_COLLECTOR_TOKEN", "from-the-environment")
    monkeypatch.setenv("AGL_KEY", "agl-secret")
    config = parse_args(["--agl-url", "http://127.0.0.1:9", "--store", str(tmp_path)])
    assert isinstance(config, CollectorConfig)
    assert (config.token, config.agl_key, config.store) == (
        "from-the-environment",
        "agl-secret",
        tmp_path / "collector.db",
    )
    # One set of defaults: the command's are the config's.
    monkeypatch.delenv("STRANDS_TITO_COLLECTOR_TOKEN")
    monkeypatch.delenv("AGL_KEY")
    assert parse_args([]) == CollectorConfig()


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("STRANDS_TITO_OUTPUT", "/tmp/t.jsonl", "output", "/tmp/t.jsonl"),
        ("STRANDS_TITO_SPANS", "all", "spans", "all"),
        ("STRANDS_TITO_SPAN_CONTENT", "1", "span_content", True),
    ],
)
def test_a_deprecated_variable_works_with_one_line_naming_its_replacement(  # type: ignore[no-untyped-def]
    caplog, name: str, value: str, field: str, expected: Any
) -> None:
    with caplog.at_level(logging.WARNING, logger="strands_tito.settings"):
        read = Settings.from_environ({name: value})
        Settings.from_environ({name: value})  # once per process, not once per read
    assert getattr(read, field) == expected
    replacement = variable(field).replacement
    assert replacement and replacement.split("=")[0] in (
        "STRANDS_TITO_CAPTURE",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"strands-tito: {name} is deprecated and goes in the next release; set {replacement}"
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("STRANDS_TITO_SPOOL_MAX_BYTES", "0"),
        ("STRANDS_TITO_SPOOL_QUEUE_SPANS", "many"),
        ("STRANDS_TITO_MAX_IMAGE_BYTES", "-1"),
        ("STRANDS_TITO_FLUSH_TIMEOUT", "soon"),
        ("STRANDS_TITO_SPANS", "some"),
    ],
)
def test_a_value_that_cannot_be_read_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(CaptureConfigError, match=name):
        Settings.from_environ({name: value})


def test_a_bad_value_never_stops_a_program_that_did_not_switch_capture_on(  # type: ignore[no-untyped-def]
    monkeypatch, caplog
) -> None:
    monkeypatch.setenv("STRANDS_TITO_SPOOL_MAX_BYTES", "lots")
    with caplog.at_level(logging.WARNING, logger="strands_tito.settings"):
        assert get_settings().spool_max_bytes == Settings().spool_max_bytes  # first use: logged, default kept
    assert "STRANDS_TITO_SPOOL_MAX_BYTES='lots'" in caplog.text
    with pytest.raises(CaptureConfigError, match="STRANDS_TITO_SPOOL_MAX_BYTES"):
        reload_settings()  # switching capture on: stops it, naming the variable


def test_read_once_until_reloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRANDS_TITO_SPAN_ENCODING", "array")
    first = get_settings()
    assert first.span_encoding == "array" and get_settings() is first
    monkeypatch.setenv("STRANDS_TITO_SPAN_ENCODING", "packed")
    assert get_settings() is first  # set in code after the first read: not seen ...
    assert reload_settings().span_encoding == "packed"  # ... until the settings are read again


class _EnvironmentSpy(dict[str, str]):
    """``os.environ`` stand-in that remembers every key looked up."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: list[str] = []

    def __getitem__(self, key: str) -> str:
        self.read.append(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.append(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.append(str(key))
        return super().__contains__(key)


async def test_a_captured_turn_reads_no_strands_tito_variable(  # type: ignore[no-untyped-def]
    start_engine, qwen3, memory, monkeypatch
) -> None:
    reload_settings()  # what switching capture on does
    spy = _EnvironmentSpy(dict(os.environ))
    monkeypatch.setattr(os, "environ", spy)
    engine = start_engine(Script(turns=[Reply(text="42")] * 2))
    model = make_model(engine, qwen3)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("Compute please.")
    await agent.invoke_async("Again.")
    assert [span for span in memory.get_finished_spans() if span.name == "chat"]  # the turns went on spans
    assert [key for key in spy.read if key.startswith(("STRANDS_TITO_", "AGL_"))] == []
