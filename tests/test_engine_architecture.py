"""The local engine's own layering: endpoints use the core's public API, the server wires them, nothing loops back.

``tests/test_architecture.py`` checks private names across packages and load-time cycles for the whole product; inside
``strands_tito.engine`` the rules are stricter: no module imports another engine module's private name, there is no
import cycle even through function-level imports, no endpoint module imports the server, and no module is over 600
lines.
"""

from __future__ import annotations

import ast

import pytest

from .test_architecture import MODULES, runtime_imports

ENGINE = "strands_tito.engine"
ENGINE_MODULES = {name: path for name, path in MODULES.items() if name == ENGINE or name.startswith(ENGINE + ".")}
#: The modules that wire things together; everything else must not import them.
WIRING = {f"{ENGINE}.server", f"{ENGINE}.cli", f"{ENGINE}.__main__", ENGINE}


def engine_imports(name: str) -> list[tuple[str, list[str]]]:
    return [(m, names) for m, names in runtime_imports(name, ENGINE_MODULES[name]) if m.startswith(ENGINE)]


@pytest.mark.parametrize("name", sorted(ENGINE_MODULES))
def test_no_private_names_between_engine_modules(name: str) -> None:
    crossing = [
        f"{module}.{imported}"
        for module, names in engine_imports(name)
        if module != name
        for imported in names
        if imported.startswith("_") and not imported.startswith("__")
    ]
    assert not crossing


@pytest.mark.parametrize("name", sorted(set(ENGINE_MODULES) - WIRING))
def test_endpoints_and_core_do_not_import_the_wiring(name: str) -> None:
    assert not [module for module, _ in engine_imports(name) if module in WIRING]


def test_no_import_cycles_in_the_engine_even_inside_functions() -> None:
    graph = {
        name: {m for m, _ in engine_imports(name) if m in ENGINE_MODULES and m != name and m != ENGINE}
        for name in ENGINE_MODULES
    }
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
    assert not cycles


@pytest.mark.parametrize("name", sorted(ENGINE_MODULES))
def test_engine_modules_stay_small(name: str) -> None:
    source = ENGINE_MODULES[name].read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 600
    long = [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
        if node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long
