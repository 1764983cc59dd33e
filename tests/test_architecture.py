"""The layering rules, checked on the source (AST) and at run time in a fresh interpreter.

Layers, bottom to top: the trajectory, span schema, record schema and assembler; capture; the providers; the local
engine (a test/dev tool). The collector and the exporters sit on the bottom layer only, so a platform engineer who
runs just ``strands-tito collect`` never loads the agent side.
"""

from __future__ import annotations

import ast
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

#: Modules of the bottom layer: plain data, the span codec, the assembler. They import no framework.
BOTTOM = {
    "strands_tito.errors",
    "strands_tito.checks",
    "strands_tito.trajectory",
    "strands_tito.trajectory_fields",
    "strands_tito.prompt_ids",
    "strands_tito.spans",
    "strands_tito.span_images",
    "strands_tito.span_lineage",
    "strands_tito.replay",
    "strands_tito.records",
    "strands_tito.assembly",
    "strands_tito.otlp",
}
#: What the bottom layer, the collector and the exporters must never import (agent side and frameworks).
AGENT_SIDE = ("strands", "transformers", "tokenizers", "opentelemetry.sdk", "strands_tito.engine")
PROVIDERS = ("strands_tito.providers",)
CAPTURE = ("strands_tito.capture",)


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


def installed_with(distribution: str) -> set[str]:
    """The distribution and the repository's distributions it depends on, transitively, as its pyproject.toml says."""
    pyproject = tomllib.loads((DISTRIBUTIONS[distribution][0] / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = {r.split("==")[0].split("[")[0] for r in pyproject["project"]["dependencies"]}
    return {distribution}.union(*(installed_with(d) for d in requirements & DISTRIBUTIONS.keys()))


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


@pytest.mark.parametrize(
    "name", sorted(set().union(*(shipped_by(d) for d in installed_with("strands-tito-collector"))))
)
def test_what_the_collector_installs_imports_no_agent_framework(name: str) -> None:
    imported = [module for module, _ in runtime_imports(name, MODULES[name])]
    assert not [m for m in imported if within(m, NOT_ON_A_COLLECTOR_HOST)]


def test_collector_and_exporters_load_no_agent_side_at_run_time() -> None:
    modules = sorted(m for m in MODULES if within(m, ("strands_tito.collector", "strands_tito.exporters")))
    forbidden = AGENT_SIDE + PROVIDERS + CAPTURE
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = [m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {forbidden!r})]\n"
        "print(','.join(sorted(bad)))\n"
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


#: Size limits (issue 13): a product module stays readable in one sitting, a function in one screen.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
LONG_REASON = "# long:"


def long_functions(path: Path) -> list[str]:
    """Functions (and methods) over ``MAX_FUNCTION_LINES`` lines, from ``def`` to their last line, that carry no
    ``# long: <reason>`` comment on the line before their ``def`` (or decorators) or on their first body line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[str] = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        # The line before the def (or its decorators), then the signature's lines down to the first body line.
        nearby = lines[max(start - 2, 0) : node.body[0].lineno]
        if not any(line.strip().startswith(LONG_REASON) for line in nearby):
            found.append(f"{node.name} ({length} lines, line {node.lineno})")
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_and_function_sizes(name: str) -> None:
    path = MODULES[name]
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines: split it"
    assert not long_functions(path), f"split them, or write '{LONG_REASON} <reason>' next to the def"
