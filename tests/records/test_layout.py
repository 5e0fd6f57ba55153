"""The byte layouts (v2 batch header, v0/v1 header, index entries) are declared in one module,
``tidelog.records.layout``: checked on the syntax trees of ``src/tidelog``, every other module
reads field offsets, sizes, struct formats and dtypes from it."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest

from tidelog.records import layout

SRC = Path(__file__).resolve().parents[2] / "src" / "tidelog"
LAYOUT = SRC / "records" / "layout.py"

# Modules still declaring parts of the layout themselves: empty, and to stay so.
NOT_YET_SWITCHED: set[str] = set()

# struct formats that are (part of) a layout: the v2 header and its pieces, the v0/v1 header, the
# producer fields, and the two index entries.
LAYOUT_FORMATS = {">qiibIhiqqqhii", ">qiib", ">qii", ">hiqqqhii", ">qhi", ">qiIbb", ">qiI", ">ii", ">qi"}
# Formats that happen to spell an index entry but encode something else (module -> formats).
UNRELATED_FORMATS = {"records/compression.py": {">ii"},  # the xerial snappy header: version, compatible version
                     "server/wire/produce_request.py": {">ii"}}  # a Produce partition's index and records length
LAYOUT_FIELD_NAMES = {"relative_offset", "batch_length", "partition_leader_epoch", "last_offset_delta",
                      "base_sequence", "records_count"}
LAYOUT_INT_NAMES = {name for name, value in vars(layout).items()
                    if name.isupper() and isinstance(value, int) and not isinstance(value, bool)}
HEADER_OFFSETS = {layout.CRC_OFFSET, layout.ATTRIBUTES_OFFSET, layout.LAST_OFFSET_DELTA_OFFSET,
                  layout.BASE_TIMESTAMP_OFFSET, layout.MAX_TIMESTAMP_OFFSET, layout.PRODUCER_ID_OFFSET,
                  layout.PRODUCER_EPOCH_OFFSET, layout.BASE_SEQUENCE_OFFSET, layout.RECORDS_COUNT_OFFSET,
                  layout.RECORDS_OFFSET}
FIELD_BOUNDS = {layout.LENGTH_OFFSET, layout.PARTITION_LEADER_EPOCH_OFFSET, layout.MAGIC_OFFSET} | HEADER_OFFSETS


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != LAYOUT)


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _int(node: ast.AST | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _is_layout_name(name: str) -> bool:
    """A module-level int named as the layout names one (or as a private copy of one: ``_LOG_OVERHEAD``;
    not ``_CRC_START``, a common name for other formats' CRC ranges)."""
    return name in LAYOUT_INT_NAMES or (name.lstrip("_") in LAYOUT_INT_NAMES and not name.startswith("_CRC"))


def layout_declarations(path: Path) -> list[str]:
    """What ``path`` declares of a layout itself: layout struct formats, numpy dtypes with layout
    field names, module-level ints named as in the layout, and header byte offsets written as
    literals (``pos + 43``, ``data[8:12]``, ``np.arange(17, 21)``)."""
    tree = ast.parse(path.read_text("utf-8"))
    found = []
    unrelated = UNRELATED_FORMATS.get(_name(path), set()) if path.is_relative_to(SRC) else set()
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and node.value in LAYOUT_FORMATS and node.value not in unrelated:
            found.append(f"{line}: struct format {node.value!r}")
        elif isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value in LAYOUT_FIELD_NAMES and len(node.elts) == 2 \
                and isinstance(node.elts[1], ast.Constant) and str(node.elts[1].value).startswith(">"):
            found.append(f"{line}: dtype field {node.elts[0].value!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) \
                and (_int(node.right) in HEADER_OFFSETS or _int(node.left) in HEADER_OFFSETS):
            found.append(f"{line}: header offset literal in {ast.unparse(node)}")
        elif isinstance(node, ast.Slice) and _int(node.lower) in FIELD_BOUNDS and _int(node.upper) in FIELD_BOUNDS:
            found.append(f"{line}: header field slice [{_int(node.lower)}:{_int(node.upper)}]")
        elif isinstance(node, ast.Slice) and node.upper is None and _int(node.lower) in HEADER_OFFSETS | {layout.MAGIC_OFFSET}:
            found.append(f"{line}: header slice [{_int(node.lower)}:]")
        elif isinstance(node, ast.Subscript) and _int(node.slice) in HEADER_OFFSETS | {layout.MAGIC_OFFSET} \
                and not ast.unparse(node.value).endswith(("_h", "h", "header")):  # not a field of an unpacked tuple
            found.append(f"{line}: header byte {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("unpack_from", "pack_into", "read_int")) \
                and any(_int(arg) in HEADER_OFFSETS for arg in node.args[1:2]):
            found.append(f"{line}: header offset literal in {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("arange") and len(node.args) == 2 \
                and _int(node.args[0]) in FIELD_BOUNDS and _int(node.args[1]) in FIELD_BOUNDS:
            found.append(f"{line}: header field range {ast.unparse(node)}")
    for node in tree.body:
        if isinstance(node, ast.Assign) and _int(node.value) is not None:
            for target in node.targets:
                if isinstance(target, ast.Name) and _is_layout_name(target.id):
                    found.append(f"{node.lineno}: {target.id} = {_int(node.value)}")
    return found


def test_the_layout_module_declares_the_v2_header_as_kafka_does() -> None:
    assert layout.HEADER.size == layout.RECORD_BATCH_OVERHEAD == 61
    assert layout.LOG_OVERHEAD == 12 and layout.HEADER_SIZE_UP_TO_MAGIC == 17
    fields = layout.HEADER.unpack(bytes(range(61)))
    assert len(fields) == 13
    assert struct.calcsize(">q") == layout.LENGTH_OFFSET  # baseOffset, then batchLength
    assert layout.OFFSET_INDEX_ENTRY.size == 8 and layout.TIME_INDEX_ENTRY.size == 12


def test_the_exception_list_names_existing_files() -> None:
    assert all((SRC / name).is_file() for name in NOT_YET_SWITCHED)


def test_the_scan_finds_a_declaration(tmp_path: Path) -> None:
    """The scan itself works: each kind of copy of the layout is found."""
    module = tmp_path / "copy.py"
    module.write_text(
        "import struct\n"
        "import numpy as np\n"
        "LOG_OVERHEAD = 12\n"
        "_PREFIX = struct.Struct('>qii')\n"
        "ENTRY = np.dtype([('relative_offset', '>i4'), ('position', '>i4')])\n"
        "def f(buf, pos):\n"
        "    return read_int(buf, pos + 43, 8), buf[16], buf[8:12], np.arange(17, 21), unpack_from(buf, 57)\n",
        "utf-8")
    found = layout_declarations(module)
    assert len(found) == 8
    assert any("LOG_OVERHEAD = 12" in f for f in found) and any("'>qii'" in f for f in found)
    assert any("pos + 43" in f for f in found) and any("np.arange(17, 21)" in f for f in found)


@pytest.mark.parametrize("path", [p for p in _modules() if _name(p) not in NOT_YET_SWITCHED], ids=_name)
def test_no_other_module_declares_a_layout(path: Path) -> None:
    assert layout_declarations(path) == []
