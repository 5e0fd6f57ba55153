"""The layering rule, checked on the syntax trees of ``src/tidelog``: no module imports a higher
layer, so nothing below the front doors (``server``, ``cli``, ``spark``) imports one of them, not
even lazily inside a function. The
cleaner gets other engines injected by whoever starts it; test helpers live under ``tests/``."""

from __future__ import annotations

import pytest
from shape_report import Module, modules, upward_imports

FRONT_DOORS = {"server", "cli", "spark"}
MODULES = list(modules())
BELOW_FRONT_DOORS = [m for m in MODULES if m.package not in FRONT_DOORS]


def test_the_layers_below_the_front_doors_are_all_checked() -> None:
    names = {m.name for m in BELOW_FRONT_DOORS}
    assert {"tidelog.retention", "tidelog.testing", "tidelog.cleaner.log_cleaner", "tidelog.manager.manager",
            "tidelog.storage.log", "tidelog.records.batch"} <= names


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_no_module_imports_a_higher_layer(module: Module) -> None:
    """The whole rule as ``make shape`` counts it (foundation -> records -> storage ->
    retention/cleaner -> manager -> front doors): below the front doors none imports one."""
    assert upward_imports(module) == []
