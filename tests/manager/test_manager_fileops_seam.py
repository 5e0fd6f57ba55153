"""The log manager changes files only through ``tidelog.storage.fileops`` too, so a fault or a
kill point reaches its topic dirs, registry, markers, renames for deletion and probes.

The checker is ``tests/storage/test_fileops_seam.py``'s (loaded from its file: test modules are not
a package), run over ``src/tidelog/manager``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
MANAGER = TESTS.parent / "src" / "tidelog" / "manager"


def _checker():
    spec = importlib.util.spec_from_file_location("fileops_seam_checker", TESTS / "storage" / "test_fileops_seam.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.direct_file_operations


direct_file_operations = _checker()


@pytest.mark.parametrize("module", sorted(MANAGER.rglob("*.py")), ids=lambda p: p.name)
def test_manager_module_changes_files_only_through_fileops(module: Path) -> None:
    found = direct_file_operations(module.read_text("utf-8"))
    assert not found, "\n".join(f"{module}:{line}: {what} bypasses tidelog.storage.fileops" for line, what in found)


def test_the_checker_sees_a_bypass_in_manager_code() -> None:
    assert direct_file_operations("def f(path):\n    os.rename(path, path.parent / 'x')\n")
