"""The layering rules, checked on the source (AST) and at run time in a fresh interpreter.

Layers, bottom to top: the trajectory, span schema, record schema and assembler; capture; the providers. The collector
and the exporters sit on the bottom layer only, so a platform engineer who runs just ``strands-tito collect`` never
loads the agent side. The test harness (``strands_tito.testing``: the local engine, offline tokenizers, template
fetchers) sits above everything and no product module imports it. The distributions follow the layers (core <-
exporters <- collector <- agent side): a module imports only what its distribution installs, so the collector
installs and runs without Strands, transformers, tokenizers or jinja2 (``tests/collector/test_collector_wheel.py``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The repository's distributions (docs/collector.md): where each one's pyproject.toml is, and the folder it ships.
DISTRIBUTIONS = {
    "strands-tito-core": (ROOT / "core", ROOT / "core"),
    "strands-tito-exporters": (ROOT / "exporters", ROOT / "exporters"),
    "strands-tito-collector": (ROOT / "collector", ROOT / "collector"),
    "strands-tito": (ROOT, ROOT / "src"),
}
SOURCE_ROOTS = [source for _, source in DISTRIBUTIONS.values()]
#: What the collector distribution (and what it installs) must never import: `pip install strands-tito-collector`
#: brings none of them.
NOT_ON_A_COLLECTOR_HOST = ("strands", "transformers", "tokenizers", "jinja2")

#: What the bottom layer, the collector and the exporters must never import (agent side and frameworks).
AGENT_SIDE = ("strands", "transformers", "tokenizers", "opentelemetry.sdk", "strands_tito.testing")
PROVIDERS = ("strands_tito.providers",)
CAPTURE = ("strands_tito.capture",)
#: The test harness: it may import the product; nothing in the product imports it, not even inside a function.
TESTING = ("strands_tito.testing",)
#: The one module per upstream library that may touch its non-public names or patch it (above the bottom layer,
#: below capture and the providers).
UPSTREAM = ("strands_tito.upstream",)
#: The libraries whose internals only those modules may touch.
UPSTREAM_LIBRARIES = ("strands", "opentelemetry", "transformers")


def product_modules(roots: list[Path] = SOURCE_ROOTS) -> Iterator[tuple[str, Path]]:
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and parts[0] == "strands_tito":
                yield ".".join(parts), path


def runtime_imports(name: str, path: Path, *, load_time_only: bool = False) -> Iterator[tuple[str, list[str]]]:
    """``(module, imported names)`` for each import that can run (not under TYPE_CHECKING); with ``load_time_only``,
    only those that run when the module loads (not inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> Iterator[tuple[str, list[str]]]:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from visit(child)
            return
        if load_time_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def within(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


MODULES = dict(product_modules())
#: Every Python file of the repository that the lint covers.
PYTHON_FILES = sorted(
    path
    for folder in ("src", "core", "collector", "exporters", "tests", "benchmarks", "examples", "scripts")
    for path in (ROOT / folder).rglob("*.py")
    # ignored folders, as ruff skips them: virtual environments (.venv, benchmarks/.venv-peer) and build output
    if not any(part.startswith(".venv") or part == "build" for part in path.relative_to(ROOT).parts)
)
#: Modules of the bottom layer, what core/ ships: plain data, the span codec, the assembler. They import no framework.
BOTTOM = {name for name, path in MODULES.items() if path.is_relative_to(DISTRIBUTIONS["strands-tito-core"][1])}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_layering(name: str) -> None:
    imported = [module for module, _ in runtime_imports(name, MODULES[name])]
    if name in BOTTOM:
        assert not [m for m in imported if within(m, AGENT_SIDE) or within(m, PROVIDERS) or within(m, CAPTURE)]
        assert not [m for m in imported if m.startswith("strands_tito.") and m not in BOTTOM]
    if within(name, ("strands_tito.collector", "strands_tito.exporters")):
        assert not [m for m in imported if within(m, AGENT_SIDE) or within(m, PROVIDERS) or within(m, CAPTURE)]
    if within(name, CAPTURE):
        assert not [m for m in imported if within(m, PROVIDERS)]
    if not within(name, TESTING):
        assert not [m for m in imported if within(m, TESTING)], "the product never imports the test harness"
    if within(name, UPSTREAM):
        assert not [m for m in imported if m.startswith("strands_tito.") and not (m in BOTTOM or within(m, UPSTREAM))]
    if name in BOTTOM or within(name, ("strands_tito.collector", "strands_tito.exporters")):
        assert not [m for m in imported if within(m, UPSTREAM)]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_names_across_modules(name: str) -> None:
    crossing = [
        f"{module}.{imported}"
        for module, names in runtime_imports(name, MODULES[name])
        if module.startswith("strands_tito") and module != name
        for imported in names
        if imported.startswith("_") and not imported.startswith("__")
    ]
    assert not crossing


def upstream_touches(source: str) -> list[str]:  # noqa: C901  one branch per kind of touch, each named in the docstring
    """Where ``source`` reaches into a library's internals: a non-public attribute of anything but ``self``/``cls``
    or a standard-library module (``x._name``, ``getattr(x, "_name")``), an assignment onto a class or module imported
    from Strands, OpenTelemetry or transformers (a patch), or a non-public name or module of theirs imported or named.

    Static code cannot tell an upstream object from another, so every object counts; strands-tito's own objects keep
    their private names to themselves anyway.
    """
    tree = ast.parse(source)
    stdlib: set[str] = set()
    from_upstream: set[str] = set()
    found: list[str] = []

    def private(name: object) -> bool:
        return isinstance(name, str) and name.startswith("_") and not name.startswith("__")

    def root(node: ast.expr) -> str:
        while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node.id if isinstance(node, ast.Name) else ""

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.partition(".")[0]
                if alias.name.partition(".")[0] in sys.stdlib_module_names:
                    stdlib.add(bound)
                elif within(alias.name, UPSTREAM_LIBRARIES):
                    from_upstream.add(bound)
                    if any(private(part) for part in alias.name.split(".")):
                        found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and within(node.module or "", UPSTREAM_LIBRARIES):
            for alias in node.names:
                from_upstream.add(alias.asname or alias.name)
                if any(private(part) for part in [*(node.module or "").split("."), alias.name]):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")

    own = {"self", "cls"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            base = ast.unparse(node.value)
            if base not in own and base != "super()" and not (isinstance(node.value, ast.Name) and base in stdlib):
                found.append(f"line {node.lineno}: {base}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            target, attribute = node.args[0], node.args[1]
            accessor = node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            named = isinstance(attribute, ast.Constant) and private(attribute.value)
            if accessor and named and ast.unparse(target) not in own:
                found.append(f"line {node.lineno}: {node.func.id}({ast.unparse(target)}, {ast.unparse(attribute)})")
            if node.func.id in ("setattr", "delattr") and root(target) in from_upstream:
                found.append(f"line {node.lineno}: {node.func.id}({ast.unparse(target)}, ...)")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and root(target) in from_upstream:
                    found.append(f"line {node.lineno}: {ast.unparse(target)} = ... (patches an upstream object)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            if len(parts) > 1 and parts[0] in UPSTREAM_LIBRARIES and any(private(p) for p in parts[1:]):
                found.append(f"line {node.lineno}: {node.value!r}")
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_upstream_internals_only_in_the_upstream_modules(name: str) -> None:
    if within(name, UPSTREAM):
        return
    touches = upstream_touches(MODULES[name].read_text(encoding="utf-8"))
    assert not touches, "use or extend strands_tito.upstream (one module per upstream library)"


@pytest.mark.parametrize(
    "source",
    [
        'state = getattr(agent, "_model_state", None)',
        "limits = span._limits",
        "from strands.models.openai import OpenAIModel\nOpenAIModel.stream = wrapped",
        "from strands.telemetry import tracer\ntracer.Tracer.__init__ = init",
        "import strands.models.openai\nsetattr(strands.models.openai.OpenAIModel, 'stream', wrapped)",
        "from transformers.utils import chat_template_utils\nchat_template_utils._compile_jinja_template(s)",
        "from transformers.utils.chat_template_utils import _compile_jinja_template",
        "provider._strands_tito_processors = []",
        'LOGGER = "opentelemetry.sdk._shared_internal"',
    ],
)
def test_the_upstream_rule_sees_each_kind_of_touch(source: str) -> None:
    assert upstream_touches(source)


def test_the_upstream_rule_allows_own_and_standard_library_names() -> None:
    source = "import os, sys\nself._lock = 1\ncls._cache.clear()\nsys._getframe(1)\nos._exit(78)\nsuper()._x()"
    assert upstream_touches(source) == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of the import graph meets, each as the modules along it."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    return cycles


def test_no_import_cycles() -> None:
    graph = {
        name: {m for m, _ in runtime_imports(name, path, load_time_only=True) if m in MODULES and m != name}
        for name, path in MODULES.items()
    }
    # A package's __init__ that re-exports its own submodules is not a cycle with them.
    for name in graph:
        graph[name] = {m for m in graph[name] if not (name.startswith(m + ".") and m in graph)}
    assert not find_cycles(graph)


def shipped_by(distribution: str) -> set[str]:
    """The modules a distribution ships (the ``.py`` files under its folder)."""
    return {name for name, _ in product_modules([DISTRIBUTIONS[distribution][1]])}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalizes it (``Pydantic_Core`` and ``pydantic-core`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(distribution: str, *, extras: bool = False) -> set[str]:
    """The distribution names its pyproject.toml requires (normalized), with those of its extras if asked."""
    project = tomllib.loads((DISTRIBUTIONS[distribution][0] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    if extras:
        requirements += [r for extra in project.get("optional-dependencies", {}).values() for r in extra]
    return {canonical(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def installed_with(distribution: str) -> set[str]:
    """The distribution and the repository's distributions it depends on, transitively, as its pyproject.toml says."""
    return {distribution}.union(*(installed_with(d) for d in requirement_names(distribution) & DISTRIBUTIONS.keys()))


def strands_tito_modules_imported(name: str) -> set[str]:
    """The strands_tito modules a module imports anywhere (functions too); ``from strands_tito import X`` names the
    submodule X, or else the top-level package (an attribute of its ``__init__``)."""
    found = set()
    for module, names in runtime_imports(name, MODULES[name]):
        if module == "strands_tito":
            found |= {f"strands_tito.{n}" if f"strands_tito.{n}" in MODULES else "strands_tito" for n in names}
        elif within(module, ("strands_tito",)):
            found.add(module)
    return found


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_each_distribution_imports_only_what_it_installs(distribution: str) -> None:
    """A module may import the strands_tito modules that its own distribution and that distribution's dependencies
    ship: never one of a distribution that may be missing (the agent side from the collector, above all)."""
    available = set().union(*(shipped_by(d) for d in installed_with(distribution)))
    reaching = {
        f"{name} -> {imported}"
        for name in shipped_by(distribution)
        for imported in strands_tito_modules_imported(name)
        if imported not in available
    }
    assert not reaching


@pytest.mark.parametrize("distribution", ["strands-tito-core", "strands-tito-exporters", "strands-tito-collector"])
def test_the_collector_distributions_declare_what_they_import(distribution: str) -> None:
    """Each third-party package a module imports when it loads is required by its distribution (or an extra of it),
    or by one of ours it depends on: on a collector host nothing else is installed."""
    providers = importlib.metadata.packages_distributions()
    declared = set().union(*(requirement_names(d, extras=True) for d in installed_with(distribution)))
    undeclared = {
        f"{name} -> {module}"
        for name in shipped_by(distribution)
        for module, _ in runtime_imports(name, MODULES[name], load_time_only=True)
        if (top := module.partition(".")[0]) not in {"", "__future__", "strands_tito", *sys.stdlib_module_names}
        and not {canonical(d) for d in providers.get(top, [])} & declared
    }
    assert not undeclared


@pytest.mark.parametrize(
    "name", sorted(set().union(*(shipped_by(d) for d in installed_with("strands-tito-collector"))))
)
def test_what_the_collector_installs_imports_no_agent_framework(name: str) -> None:
    imported = [module for module, _ in runtime_imports(name, MODULES[name])]
    assert not [m for m in imported if within(m, NOT_ON_A_COLLECTOR_HOST)]


def test_collector_and_exporters_load_no_agent_side_at_run_time() -> None:
    """Everything the collector installs, imported (with ``import strands_tito`` first, the agent side's lazy
    ``__init__`` in this checkout), loads no agent side."""
    modules = sorted(set().union(*(shipped_by(d) for d in installed_with("strands-tito-collector"))))
    forbidden = AGENT_SIDE + NOT_ON_A_COLLECTOR_HOST + PROVIDERS + CAPTURE
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = [m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {forbidden!r})]\n"
        "print(','.join(sorted(bad)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_providers_load_no_test_harness_at_run_time() -> None:
    """The public API and both providers load neither the testing package nor its sdist downloader (pip download)."""
    script = (
        "import sys\n"
        "import strands_tito\n"
        "from strands_tito import SGLangModel, VLLMModel\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('strands_tito.testing') or 'sdist' in m)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_public_api_stays_importable_lazily() -> None:
    import strands_tito

    for name in strands_tito.__all__:
        assert getattr(strands_tito, name) is not None
    assert sorted(strands_tito.__all__) == sorted(set(strands_tito.__all__))


def test_strands_sglang_module_paths_are_served_from_compat_and_nothing_else() -> None:
    import importlib
    import warnings

    from strands_tito.compat import MODULE_PATHS

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strands-sglang's module paths are permanent and silent
        for path, serving in MODULE_PATHS.items():
            assert importlib.import_module(path) is importlib.import_module(serving)
    # strands-tito's own former paths never shipped in a release: gone.
    for gone in ("strands_tito.prompt", "strands_tito.spool", "strands_tito.instrument", "strands_tito.vllm"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)


#: The lint rules that replace size caps (pyproject.toml): complexity, argument counts, statements. A function over a
#: limit that still reads straight through is allowed with a noqa comment that names the code, then the reason
#: (required).
READABILITY_RULES = ("C901", "PLR0913", "PLR0915", "PLR0917")
NOQA = re.compile(r"#\s*noqa:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)(.*)$")


def unexplained_noqa(source: str) -> list[str]:
    """The ``# noqa`` comments that silence a readability rule without saying why (at least three words after the
    codes)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        match = NOQA.search(line)
        silenced = match is not None and any(code.strip() in READABILITY_RULES for code in match[1].split(","))
        if silenced and match is not None and len(re.findall(r"\w+", match[2])) < 3:
            found.append(f"line {number}: {line.strip()}")
    return found


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_readability_exception_says_why(path: Path) -> None:
    assert not unexplained_noqa(path.read_text(encoding="utf-8")), "write '# noqa: <code>  <why it reads well>'"


def test_the_readability_rules_are_the_lint_config() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert set(READABILITY_RULES) <= set(config["select"])
    assert config["mccabe"]["max-complexity"] == 12
    assert (config["pylint"]["max-args"], config["pylint"]["max-positional-args"]) == (12, 5)
    assert config["pylint"]["max-statements"] == 50


MARK = "no" + "qa"  # spelled in pieces so that this file's own text holds none of the examples below


@pytest.mark.parametrize(
    ("source", "unexplained"),
    [
        (f"def f():  # {MARK}: C901", True),
        (f"def f(a, b):  # {MARK}: PLR0913, PLR0917", True),
        (f"def f():  # {MARK}: C901  ok", True),
        (f"def f():  # {MARK}: C901  one branch per kind, read as a table", False),
        (f"import x  # {MARK}: F401", False),
    ],
)
def test_the_noqa_rule_tells_a_reason_from_none(source: str, unexplained: bool) -> None:
    assert bool(unexplained_noqa(source)) is unexplained


TESTS = ROOT / "tests"
#: Test folders not named after a product package, and what each holds. Every other folder is a package's name.
TEST_FOLDERS_BESIDES_PACKAGES = {
    "core": "the core distribution (core/strands_tito, the bottom layer): the trajectory, checks, records, errors",
    "cli": "the commands a user types (strands_tito.cli, the viewer), the README as written, the built wheel",
    "data": "data files the tests share",
    "helpers": "the one helpers package (tests/helpers/__init__.py maps it)",
}


def test_the_tests_mirror_the_product() -> None:
    """A test of ``strands_tito.X`` lives in ``tests/X/``; only this file, the whole project's rules, sits on top."""
    packages = {name.split(".")[1] for name, path in MODULES.items() if path.name == "__init__.py" and "." in name}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert not folders - packages - set(TEST_FOLDERS_BESIDES_PACKAGES), "name a test folder after its package"
    assert [p.name for p in TESTS.glob("test_*.py")] == [Path(__file__).name], "put a test in its package's folder"


#: Test modules another test may import, and why: the engine's own layering test reuses the product's import graph.
TEST_MODULES_IMPORTED_ON_PURPOSE = {"tests.test_architecture"}
#: Scripts the tests start as processes (they are run, not imported), besides test modules and helpers.
TEST_SCRIPTS = {
    "tests/capture/spool_load_agents.py",
    "tests/capture/lineage_programs.py",
    "tests/compat/in_strands_env",
}


def test_helpers_live_in_one_package() -> None:
    """A helper is written once, in ``tests.helpers``: no test imports another test module or a conftest, and no
    module besides tests, conftests and scripts the tests start sits outside ``tests/helpers``."""
    crossing, stray = [], []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if any(relative == s or relative.startswith(s + "/") for s in TEST_SCRIPTS):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for module, _ in runtime_imports(name, path):
            last = module.rpartition(".")[2]
            a_test = module.startswith("tests.") and (last.startswith("test_") or last == "conftest")
            if a_test and module not in TEST_MODULES_IMPORTED_ON_PURPOSE:
                crossing.append(f"{relative}: {module}")
        helper = not (path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py"))
        if helper and path.parent != TESTS / "helpers":
            stray.append(relative)
    assert not crossing, f"move what they share into tests/helpers: {crossing}"
    assert not stray, f"helpers belong in tests/helpers: {stray}"


def private_reaches(source: str) -> list[str]:
    """Where test code reaches a non-public name of an object it did not define: ``from strands_tito.x import _y``,
    ``obj._y``, ``getattr``/``setattr``/``monkeypatch.setattr(obj, "_y", ...)`` (not ``self``, ``cls`` or a standard
    library module)."""
    tree = ast.parse(source)
    stdlib = {
        alias.asname or alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.partition(".")[0] in sys.stdlib_module_names
    }

    def private(name: object) -> bool:
        return isinstance(name, str) and name.startswith("_") and not name.startswith("__")

    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and within(node.module or "", ("strands_tito",)):
            module = node.module or ""
            found += [f"from {module} import {a.name}" for a in node.names if private(a.name)]
            if any(private(part) for part in module.split(".")):
                found.append(f"from {module} import ...")
        elif isinstance(node, ast.Attribute) and private(node.attr):
            base = ast.unparse(node.value)
            if base not in ("self", "cls", "super()") and base not in stdlib:
                found.append(f"{base}.{node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("getattr", "setattr", "hasattr", "delattr") and private(node.args[1].value):
                found.append(f"{name}({ast.unparse(node.args[0])}, {node.args[1].value!r})")
    return found


#: Non-public names of other libraries that tests reach on purpose. Only upstream objects belong here, each with why.
UPSTREAM_PRIVATE_IN_TESTS = {
    # Agent Lightning's own trainer code calls these; the test runs that code as shipped (helpers/agl_trainer.py).
    ("tests/exporters/test_agentlightning.py", "manager._get_rollout"),
    ("tests/exporters/test_agentlightning.py", "manager._build_completed_rollout"),
}
#: Test files about upstream internals themselves: what strands_tito.upstream relies on in Strands, the OpenTelemetry
#: SDK and transformers, checked where it is and removed to see the failure an upgrade would bring.
UPSTREAM_TEST_FILES = {"tests/upstream/test_upstream.py"}


def test_tests_use_public_names_only() -> None:
    found = {
        (path.relative_to(ROOT).as_posix(), reach)
        for path in sorted(TESTS.rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in UPSTREAM_TEST_FILES
        for reach in private_reaches(path.read_text(encoding="utf-8"))
    }
    assert not found - UPSTREAM_PRIVATE_IN_TESTS, "test through a public name (make a real seam public, with docstring)"


@pytest.mark.parametrize(
    "source",
    [
        "from strands_tito.providers.sglang import _parse_reply",
        "client._pool.close()",
        "monkeypatch.setattr(capture, '_tracer', tracer)",
        "getattr(provider, '_strands_tito_processors')",
    ],
)
def test_the_public_names_rule_sees_each_kind_of_reach(source: str) -> None:
    assert private_reaches(source)


def test_the_public_names_rule_allows_own_and_standard_library_names() -> None:
    assert private_reaches("import sys, os\nself._x = 1\ncls._y\nsys._getframe(0)\nos._exit(0)\nsuper()._z()") == []


#: What the product may take from the ``random`` module: generators of its own, never the module's shared state.
OWN_GENERATORS = {"Random", "SystemRandom"}


def global_random_draws(source: str) -> list[str]:
    """Uses of the ``random`` module's functions, which draw from (or reseed) the global state a user's seeded
    experiment relies on; ``random.Random()`` and ``random.SystemRandom()`` keep their own."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for alias in n.names
        if alias.name == "random"
    }
    found = [
        f"line {n.lineno}: from random import {alias.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "random"
        for alias in n.names
        if alias.name not in OWN_GENERATORS
    ]
    found += [
        f"line {n.lineno}: {n.value.id}.{n.attr}"  # type: ignore[attr-defined]
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in names
        and n.attr not in OWN_GENERATORS
    ]
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_product_never_draws_from_the_global_random_state(name: str) -> None:
    assert not global_random_draws(MODULES[name].read_text(encoding="utf-8")), (
        "draw from a generator of the module's own (random.SystemRandom()), not the random module's global state"
    )


@pytest.mark.parametrize(
    "source",
    ["import random\nrandom.uniform(0, 1)", "import random as r\nr.getrandbits(64)", "from random import randint"],
)
def test_the_random_rule_sees_each_kind_of_draw(source: str) -> None:
    assert global_random_draws(source)


def test_the_random_rule_allows_own_generators() -> None:
    source = "import random\nfrom random import Random\nJ = random.SystemRandom()\nR = Random(3)\nJ.uniform(0, 1)"
    assert global_random_draws(source) == []


#: The module that states each validity rule for token ids and logprobs (docs of :mod:`strands_tito.checks`).
CHECKS_MODULE = "strands_tito.checks"
#: The rule's constants: other modules call the rule's functions instead of comparing against them.
RULE_CONSTANTS = {"MAX_TOKEN_ID", "FLOAT32_OVERFLOW", "LOGPROB_FLOOR"}


def validity_rule_copies(source: str) -> list[str]:
    """Copies of the id and logprob rule: the rule's constants by name, vLLM's ``-9999.0`` floor, or the int32
    bound ``2**31`` written out (``checks.MAX_INT32`` names it)."""
    found: list[str] = []
    for n in ast.walk(ast.parse(source)):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name in RULE_CONSTANTS:
            found.append(f"line {n.lineno}: {name}")  # type: ignore[attr-defined]
        elif isinstance(n, ast.alias) and n.name in RULE_CONSTANTS:
            found.append(f"line {n.lineno}: import of {n.name}")
        elif isinstance(n, ast.Constant) and type(n.value) in (int, float) and abs(n.value) == 9999:
            found.append(f"line {n.lineno}: the value {n.value}")
        elif (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Pow)
            and isinstance(n.left, ast.Constant)
            and isinstance(n.right, ast.Constant)
            and (n.left.value, n.right.value) == (2, 31)
        ):
            found.append(f"line {n.lineno}: 2**31")
    return found


@pytest.mark.parametrize("name", sorted(set(MODULES) - {CHECKS_MODULE}))
def test_the_validity_rule_lives_only_in_checks(name: str) -> None:
    if within(name, TESTING):
        pytest.skip("the test harness impersonates the servers, and writes their values itself")
    assert not validity_rule_copies(MODULES[name].read_text(encoding="utf-8")), (
        "call strands_tito.checks (token_ids, is_token_id_list, logprob_value, logprobs, refuse_logprob_floor, "
        "logprob_floor_as_missing) instead of restating its rule"
    )


@pytest.mark.parametrize(
    "source",
    [
        "ok = v < 2**31",
        "from strands_tito.checks import FLOAT32_OVERFLOW",
        "ok = abs(v) < checks.FLOAT32_OVERFLOW",
        "FLOOR = -9999.0",
        "if v == -9999: pass",
    ],
)
def test_the_validity_rule_check_sees_each_kind_of_copy(source: str) -> None:
    assert validity_rule_copies(source)


def test_the_validity_rule_check_allows_calls_and_other_numbers() -> None:
    source = "checks.refuse_logprob_floor(v, 'x', E)\nn = 2**32\nm = checks.MAX_INT32\nk = 999"
    assert validity_rule_copies(source) == []
