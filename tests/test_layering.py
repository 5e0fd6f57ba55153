"""The layering rule, checked on the syntax trees of ``src/tidelog``: nothing below the front doors
(``server``, ``cli``, ``spark``) imports one of them, not even lazily inside a function. The
cleaner gets other engines injected by whoever starts it; test helpers live under ``tests/``."""

from __future__ import annotations

import pytest
from shape_report import Module, imported, modules, package_of

FRONT_DOORS = {"server", "cli", "spark"}
BELOW_FRONT_DOORS = [m for m in modules() if m.package not in FRONT_DOORS]


def test_the_layers_below_the_front_doors_are_all_checked() -> None:
    names = {m.name for m in BELOW_FRONT_DOORS}
    assert {"tidelog.retention", "tidelog.testing", "tidelog.cleaner.log_cleaner", "tidelog.manager.manager",
            "tidelog.storage.log", "tidelog.records.batch"} <= names


@pytest.mark.parametrize("module", BELOW_FRONT_DOORS, ids=lambda m: m.name)
def test_no_module_below_the_front_doors_imports_one(module: Module) -> None:
    upward = [f"{module.name}:{line} imports {name}" for name, line in imported(module)
              if package_of(name) in FRONT_DOORS]
    assert upward == []
