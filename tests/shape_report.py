"""The shape of ``src/tidelog``, measured from its syntax trees: module sizes, function lengths,
imports that go up the layers, and import cycles between packages (``make shape``).

Layers, lowest first: the foundation modules (errors, clock, scheduler, ...), ``records``,
``storage``, ``retention``/``cleaner``, ``manager``, then the front doors ``server``, ``cli``,
``spark``. A module may import its own layer and those below; every import counts, a lazy one
inside a function included. Exit status 1 when a target of the architecture issue is not met
(listed at the end), so the figures can be tracked before and after a change.
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "tidelog"
LAYERS = {"records": 1, "storage": 2, "retention": 3, "cleaner": 3, "remote": 3, "manager": 4, "server": 5, "cli": 5, "spark": 5}
MAX_MODULE_LINES, MAX_MEDIAN, MAX_P90, MAX_FUNCTION = 600, 8, 25, 60


@dataclass(frozen=True, slots=True)
class Module:
    name: str  # dotted, e.g. tidelog.storage.log
    path: Path
    tree: ast.Module
    lines: int

    @property
    def package(self) -> str:
        """The layer's package (``storage``), or the module itself for a top-level module."""
        return package_of(self.name)

    @property
    def layer(self) -> int:
        return layer_of(self.name)


def modules() -> Iterator[Module]:
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT.parent).with_suffix("")
        parts = [p for p in relative.parts if p != "__init__"]
        text = path.read_text()
        yield Module(".".join(parts), path, ast.parse(text), len(text.splitlines()))


def imported(module: Module) -> Iterator[tuple[str, int]]:
    """``(tidelog module name, line)`` of every import in ``module``, however deep."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        yield from ((name, node.lineno) for name in names if name.startswith("tidelog."))


def function_lengths(module: Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            yield f"{module.name}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1


def package_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(name: str) -> int:
    """The layer of a module (or of any name inside it)."""
    return LAYERS.get(package_of(name), 0)


def upward_imports(module: Module) -> list[str]:
    """The imports of ``module`` from a higher layer than its own."""
    return [f"{module.name}:{line} imports {name}" for name, line in imported(module) if layer_of(name) > module.layer]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    found = list(modules())
    big = sorted(((m.lines, m.name) for m in found if m.lines > MAX_MODULE_LINES), reverse=True)
    lengths = sorted((n for m in found for _, n in function_lengths(m)))
    long_functions = sorted(((n, where) for m in found for where, n in function_lengths(m) if n > MAX_FUNCTION),
                            reverse=True)
    upward = [line for m in found for line in upward_imports(m)]
    edges = defaultdict(set)
    for m in found:
        for name, _ in imported(m):
            if package_of(name) != m.package:
                edges[m.package].add(package_of(name))
    median, p90 = statistics.median(lengths), lengths[int(0.9 * (len(lengths) - 1))]
    package_cycles = cycles(edges)

    print(f"modules: {len(found)}; over {MAX_MODULE_LINES} lines: {len(big)}")
    for lines, name in big:
        print(f"  {lines:5d} {name}")
    print(f"functions: {len(lengths)}; median {median} lines (target <= {MAX_MEDIAN}), "
          f"p90 {p90} (target <= {MAX_P90}); over {MAX_FUNCTION} lines: {len(long_functions)}")
    for n, where in long_functions:
        print(f"  {n:5d} {where}")
    print(f"upward imports: {len(upward)}")
    for line in upward:
        print(f"  {line}")
    print(f"package import cycles: {len(package_cycles)}")
    for component in package_cycles:
        print(f"  {' <-> '.join(component)}")
    met = not (big or long_functions or upward or package_cycles) and median <= MAX_MEDIAN and p90 <= MAX_P90
    print("targets met" if met else "targets not met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
