"""The seam stays complete: no module under a seam package changes the disk except through
``tidelog.storage.fileops`` (so faults and kill points reach every file operation).

A static check over the AST: calls such as ``os.replace``, ``os.fsync``, ``Path.unlink``,
``shutil.rmtree``, ``mmap.mmap`` or a builtin ``open`` for writing fail the test, naming file and
line. ``fileops.py`` itself is the one module allowed to make them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tidelog"
SEAM_PACKAGES = ("storage", "cleaner")  # manager/: tests/manager/test_manager_fileops_seam.py
ALLOWED = {SRC / "storage" / "fileops.py"}

FORBIDDEN_MODULE_CALLS = {
    "os": {"open", "write", "writev", "pwrite", "pwritev", "fsync", "fdatasync", "rename", "renames",
           "replace", "unlink", "remove", "rmdir", "removedirs", "truncate", "ftruncate", "mkdir",
           "makedirs", "posix_fallocate"},
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"},
    "mmap": {"mmap"},
}
# Path methods (and file-object writes) with no other meaning in our code base.
FORBIDDEN_METHODS = {"unlink", "rename", "mkdir", "rmdir", "touch", "write_bytes", "write_text", "hardlink_to",
                     "symlink_to"}
WRITE_MODE_LETTERS = set("wax+")


def seam_modules() -> list[Path]:
    return sorted(p for pkg in SEAM_PACKAGES for p in (SRC / pkg).rglob("*.py") if p not in ALLOWED)


def direct_file_operations(source: str) -> list[tuple[int, str]]:
    """``(line, description)`` of every file operation made around the seam."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in FORBIDDEN_MODULE_CALLS:
            for alias in node.names:
                if alias.name in FORBIDDEN_MODULE_CALLS[node.module]:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        if isinstance(node, ast.Call):
            what = _forbidden_call(node)
            if what:
                found.append((node.lineno, what))
    return found


def _forbidden_call(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "open" and _opens_for_writing(call):
        return "builtin open() for writing"
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if owner in FORBIDDEN_MODULE_CALLS:
        return f"{owner}.{func.attr}()" if func.attr in FORBIDDEN_MODULE_CALLS[owner] else None
    if owner == "fileops":
        return None
    if func.attr in FORBIDDEN_METHODS:
        return f".{func.attr}()"
    # Path.replace(target) takes one argument; str.replace takes two, dataclasses.replace keywords.
    if func.attr == "replace" and len(call.args) == 1 and not call.keywords and owner != "dataclasses":
        return ".replace(target)"
    if func.attr == "open" and _opens_for_writing(call, mode_index=0, computed=False):
        return "Path.open() for writing"
    return None


def _opens_for_writing(call: ast.Call, mode_index: int = 1, computed: bool = True) -> bool:
    """Whether the mode argument can write; ``computed``: the answer when it is not a literal."""
    mode: ast.expr | None = call.args[mode_index] if len(call.args) > mode_index else None
    for keyword in call.keywords:
        if keyword.arg == "mode":
            mode = keyword.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(WRITE_MODE_LETTERS & set(mode.value))
    return computed  # builtin open: a computed mode cannot be told apart, so not allowed


@pytest.mark.parametrize("module", seam_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_module_changes_files_only_through_fileops(module: Path) -> None:
    found = direct_file_operations(module.read_text("utf-8"))
    assert not found, "\n".join(f"{module}:{line}: {what} bypasses tidelog.storage.fileops" for line, what in found)


@pytest.mark.parametrize("snippet", [
    "os.replace(a, b)", "os.fsync(fd)", "path.unlink(missing_ok=True)", "path.rename(other)",
    "shutil.rmtree(d)", "open(p, 'wb')", "p.open('ab')", "mmap.mmap(fd, 0)", "tmp.replace(target)",
    "from os import fsync", "d.mkdir(parents=True)", "os.ftruncate(fd, 0)", "os.pwritev(fd, v, 0)",
])
def test_checker_flags_direct_file_operations(snippet: str) -> None:
    assert direct_file_operations(snippet)


@pytest.mark.parametrize("snippet", [
    "fileops.rename(a, b)", "name.replace('.', '_')", "dataclasses.replace(x, a=1)", "open(p, 'rb')",
    "os.pread(fd, 4, 0)", "os.listdir(d)", "os.close(fd)", "fileops.unlink(p)", "p.open()",
])
def test_checker_allows_reads_and_the_seam(snippet: str) -> None:
    assert not direct_file_operations(snippet)
