"""Producer id allocation, unique across restarts (the part of Kafka's ``ProducerIdManager`` a
single broker needs).

Kafka's brokers take blocks of 1000 producer ids from the controller, which records each block
in the metadata log (``ProducerIdsRecord``) before handing it out; a broker that restarts asks
for a new block, so ids are never reused, at the cost of skipping the rest of the old block.
tidelog has no controller, so the block is recorded in a small file in the log dirs::

    <first log dir>/tidelog-producer-ids      (a Java properties file, written atomically)
    version=0
    next.block.start=3000                     the first id no block has handed out

Before the first id of a block is handed out, ``next.block.start`` is moved past the block and
the file replaced crash-safely (write, fsync, rename, fsync dir: :func:`write_atomically`). A
crash at any point therefore never reissues an id: at worst the rest of a block is skipped.

At start the allocator begins at the highest of: ``next.block.start`` of every log dir holding
the file (so moving or reordering ``log.dirs`` is harmless), and one past the highest producer
id in the loaded logs' producer state (so a data dir adopted from Kafka, whose ids came from
Kafka's controller, never sees one of its live producer ids issued again to someone else).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from tidelog.errors import CheckpointError
from tidelog.storage.atomic import write_atomically
from tidelog.storage.properties import format_properties, read_properties_file

PRODUCER_IDS_FILE = "tidelog-producer-ids"
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_VERSION = "0"


class ProducerIdManager:
    """Hands out producer ids; thread-safe. Each new block costs one atomic file replacement."""

    def __init__(self, log_dirs: Iterable[Path], highest_known_id: int = -1) -> None:
        self._dirs = list(log_dirs)
        if not self._dirs:
            raise CheckpointError("producer ids need at least one log dir")
        self._lock = threading.Lock()
        self._next = max([highest_known_id + 1, *(read_next_block_start(d) for d in self._dirs)])
        self._block_end = self._next  # nothing reserved yet

    @property
    def path(self) -> Path:
        return self._dirs[0] / PRODUCER_IDS_FILE

    def generate_producer_id(self) -> int:
        """A producer id never handed out before, by this or an earlier run."""
        with self._lock:
            if self._next >= self._block_end:
                self._reserve_block()
            pid = self._next
            self._next += 1
            return pid

    def _reserve_block(self) -> None:
        end = self._next + PRODUCER_ID_BLOCK_SIZE
        text = format_properties({"version": _VERSION, "next.block.start": str(end)},
                                 comments=["producer ids below next.block.start may have been handed out"])
        write_atomically(self.path, text.encode("utf-8"))
        self._block_end = end


def read_next_block_start(log_dir: Path) -> int:
    """``next.block.start`` of ``log_dir``'s file, 0 when there is none; CheckpointError when the
    file does not parse."""
    path = log_dir / PRODUCER_IDS_FILE
    if not path.exists():
        return 0
    props = read_properties_file(path)
    if props.get("version") != _VERSION:
        raise CheckpointError(f"unknown version {props.get('version')!r} of {PRODUCER_IDS_FILE}", path=path)
    try:
        start = int(props["next.block.start"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"{PRODUCER_IDS_FILE} has no valid next.block.start", path=path) from e
    if start < 0:
        raise CheckpointError(f"negative next.block.start {start}", path=path)
    return start
