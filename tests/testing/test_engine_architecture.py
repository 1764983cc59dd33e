"""The local engine's own layering: endpoints use the core's public API, the server wires them, nothing loops back.

``tests/test_architecture.py`` checks private names, sizes and load-time cycles for the whole product; inside
``strands_tito.testing.engine`` the rules are stricter: there is no import cycle even through function-level imports,
and no endpoint module imports the server.
"""

from __future__ import annotations

import pytest

from ..test_architecture import MODULES, find_cycles, runtime_imports

ENGINE = "strands_tito.testing.engine"
ENGINE_MODULES = {name: path for name, path in MODULES.items() if name == ENGINE or name.startswith(ENGINE + ".")}
#: The modules that wire things together; everything else must not import them.
WIRING = {f"{ENGINE}.server", f"{ENGINE}.cli", f"{ENGINE}.__main__", ENGINE}


def engine_imports(name: str) -> list[tuple[str, list[str]]]:
    return [(m, names) for m, names in runtime_imports(name, ENGINE_MODULES[name]) if m.startswith(ENGINE)]


@pytest.mark.parametrize("name", sorted(set(ENGINE_MODULES) - WIRING))
def test_endpoints_and_core_do_not_import_the_wiring(name: str) -> None:
    assert not [module for module, _ in engine_imports(name) if module in WIRING]


def test_no_import_cycles_in_the_engine_even_inside_functions() -> None:
    graph = {
        name: {m for m, _ in engine_imports(name) if m in ENGINE_MODULES and m != name and m != ENGINE}
        for name in ENGINE_MODULES
    }
    assert not find_cycles(graph)
