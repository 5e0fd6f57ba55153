"""A segment's append state (:class:`AppendState`) and the compiled leader append that reads and
updates it (:func:`produced_batch_appender`).

The state is ``TAIL_SLOTS`` int64 slots of one numpy array, laid out in
:mod:`tidelog.storage._append_kernel`: the ``.log``'s size, the segment's max timestamp and
index-entry spacing, its two index files' state, and, while it is *armed*, everything else the
compiled append needs (descriptor, base offset, roll limits, the topic's rules). Python reads and
writes the slots as typed attributes of :class:`AppendState`; the kernel takes the array itself,
so a 1-record append needs no Python bookkeeping around its one compiled call.

Arming is a promise that the slots say everything the kernel must know. Whatever breaks that
promise (a truncation, a roll, index files closed or resized, recovery...) invalidates the state
(:meth:`AppendState.invalidate`): ``LogSegment`` declares those methods with
:func:`invalidates_append_state`, so no change of a segment can leave a stale arming behind, and
every invalidation bumps :attr:`AppendState.generation`.

Not thread-safe: the owning log's lock is held around every use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tidelog import twins
from tidelog.records import _crc_kernels, _scan_kernels, layout
from tidelog.records.scan import ACTIVE_IMPLEMENTATION, entry_point, get_kernels
from tidelog.storage import _append_kernel as ak

# append(buf, state array, now, base_offset, leader_epoch) -> (status, lastOffsetDelta, maxTimestamp)
ProducedBatchAppend = Callable[[bytes, np.ndarray, int, int, int], tuple[int, int, int]]

F = TypeVar("F", bound=Callable[..., Any])


class TailSlot:
    """An int attribute kept in slot ``slot`` of its object's ``tail_slots`` (an AppendState's, the
    FileRecords' that shares it, or an index's state, which for a segment's index is a slice of the
    segment's AppendState)."""

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def __get__(self, obj: Any, owner: type | None = None) -> int:
        return obj.tail_slots[self.slot]  # type: ignore[no-any-return]

    def __set__(self, obj: Any, value: int) -> None:
        obj.tail_slots[self.slot] = value


class AppendState:
    """One segment's append state (see the module docstring). ``array`` is what the kernel
    takes; ``tail_slots`` is how Python reads and writes it (ints, where the array gives numpy's)."""

    __slots__ = ("array", "tail_slots", "generation")

    def __init__(self) -> None:
        self.array = np.zeros(ak.TAIL_SLOTS, dtype=np.int64)
        self.tail_slots = memoryview(self.array)
        self.generation = 0  # bumped by every invalidate()

    size = TailSlot(ak.TAIL_SIZE)
    offset_of_max_timestamp = TailSlot(ak.TAIL_OFFSET_OF_MAX_TIMESTAMP)
    bytes_since_last_index_entry = TailSlot(ak.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY)
    written = TailSlot(ak.TAIL_WRITTEN)  # after PRODUCED_SHORT_WRITE: the bytes the write wrote (-errno)

    @property
    def max_timestamp(self) -> int | None:
        """The segment's max timestamp so far; None: not loaded yet."""
        value: int = self.tail_slots[ak.TAIL_MAX_TIMESTAMP]
        return None if value == ak.TAIL_UNKNOWN else value

    @max_timestamp.setter
    def max_timestamp(self, value: int | None) -> None:
        self.tail_slots[ak.TAIL_MAX_TIMESTAMP] = ak.TAIL_UNKNOWN if value is None else value

    @property
    def max_timestamp_in_index(self) -> bool:
        """The max timestamp was read from the time index (closing need not append it)."""
        return self.tail_slots[ak.TAIL_MAX_TIMESTAMP_IN_INDEX] != 0

    @max_timestamp_in_index.setter
    def max_timestamp_in_index(self, value: bool) -> None:
        self.tail_slots[ak.TAIL_MAX_TIMESTAMP_IN_INDEX] = int(value)

    @property
    def armed(self) -> bool:
        """Whether the compiled append may use this state. Takes no lock (the log's is held)."""
        return self.tail_slots[ak.TAIL_ARMED] == 1

    def invalidate(self) -> None:
        """No compiled append until armed again. Not thread-safe: under the log's lock."""
        self.tail_slots[ak.TAIL_ARMED] = 0
        self.generation += 1

    def arm(self, fd: int, base_offset: int, segment_bytes: int, max_timestamp_limit: int,
            index_interval_bytes: int, rules: tuple[int, bool, int, int]) -> None:
        """Fill in what the kernel needs beyond the bookkeeping (``rules``: max.message.bytes,
        compact, the two timestamp bounds), then arm. Not thread-safe: under the log's lock."""
        slots = self.tail_slots
        slots[ak.TAIL_FD], slots[ak.TAIL_BASE_OFFSET] = fd, base_offset
        slots[ak.TAIL_SEGMENT_BYTES], slots[ak.TAIL_MAX_TIMESTAMP_LIMIT] = segment_bytes, max_timestamp_limit
        slots[ak.TAIL_INDEX_INTERVAL_BYTES] = index_interval_bytes
        max_message_bytes, compact, before_max_ms, after_max_ms = rules
        slots[ak.TAIL_MAX_MESSAGE_BYTES], slots[ak.TAIL_COMPACT] = max_message_bytes, int(compact)
        slots[ak.TAIL_BEFORE_MAX_MS], slots[ak.TAIL_AFTER_MAX_MS] = before_max_ms, after_max_ms
        slots[ak.TAIL_ARMED] = 1

    def offset_index_state(self) -> np.ndarray:
        """The offset index's INDEX_STATE_SLOTS slots (a view: the index keeps its state here).
        Thread-safe (no state changes)."""
        return self.array[ak.TAIL_OFFSET_INDEX:ak.TAIL_OFFSET_INDEX + ak.INDEX_STATE_SLOTS]

    def time_index_state(self) -> np.ndarray:
        """The time index's INDEX_STATE_SLOTS slots (a view). Thread-safe (no state changes)."""
        return self.array[ak.TAIL_TIME_INDEX:ak.TAIL_TIME_INDEX + ak.INDEX_STATE_SLOTS]


def invalidates_append_state(method: F) -> F:
    """Declares a method of an object with an ``append_state`` as one that changes what the state
    describes: the state is invalidated before the method runs (one call, ~0.1 us)."""
    @functools.wraps(method)
    def invalidating(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.append_state.invalidate()
        return method(self, *args, **kwargs)
    return invalidating  # type: ignore[return-value]


# --- the compiled append ------------------------------------------------------------------------

def produced_batch_appender() -> ProducedBatchAppend | None:
    """The compiled :func:`_append_kernel.append_produced_batch` (check a produced batch below
    CRC_IN_KERNEL_BELOW bytes, write it at the end of a segment with its offsets and leader epoch
    patched in, one libc ``pwrite`` without the GIL, keep the state's bookkeeping), entered through
    its one specialisation (``records.scan.entry_point``); None for the interpreted twin, or where
    the write cannot be compiled (off Linux): the caller then takes the Python path, the same
    steps through ``storage.validator`` and ``LogSegment.append_if_no_roll``. The caller owns the
    descriptor and every rule about files (it must not use this while a fileops fault plan is
    installed). Resolved once, then cached; thread-safe."""
    return _appenders()[0]


def crc_checked_batch_appender() -> ProducedBatchAppend | None:
    """The compiled :func:`_append_kernel.append_crc_checked_batch`: :func:`produced_batch_appender`
    for a batch of any size whose CRC the caller has checked (above WRITE_BUFFER_BYTES one
    ``pwritev``); None where that one is None."""
    return _appenders()[1]


_APPENDERS: tuple[ProducedBatchAppend | None, ProducedBatchAppend | None] | None = None


def _appenders() -> tuple[ProducedBatchAppend | None, ProducedBatchAppend | None]:
    global _APPENDERS
    if _APPENDERS is None:
        _APPENDERS = _compile_appenders() if ACTIVE_IMPLEMENTATION == "numba" else (None, None)
    return _APPENDERS


def _compile_appenders() -> tuple[ProducedBatchAppend | None, ProducedBatchAppend | None]:
    from tidelog.records import _crc_intrinsics
    from tidelog.storage import _write_intrinsics

    intrinsics = _write_intrinsics.libc_calls()
    if intrinsics is None:
        return None, None
    # The active twin's compiled check_produced_batch is the one called: nothing is compiled twice.
    # The batch's CRC: SSE4.2's crc32 where the CPU has it, else crc32c_u8/u64 compiled as they are.
    crc = _crc_intrinsics.sse42_crc32c()
    inlined = ak.NUMBA_APPEND_INLINED + (("crc32c_u8", "crc32c_u64") if crc is None else ())
    check = get_kernels(False).check_produced_batch  # type: ignore[attr-defined]
    source = {**vars(_crc_kernels), **vars(_scan_kernels), **vars(ak), **intrinsics, **(crc or {}), "check_produced_batch": check}
    namespace = twins.compile_functions(source, inlined, ak.NUMBA_APPEND_COMPILED, _scan_kernels.NUMBA_OPTIONS,
                                        (_scan_kernels, _crc_kernels, layout, _write_intrinsics, _crc_intrinsics))
    signature = ("bytes", "int64[]", "int64", "int64", "int64")
    return (entry_point(namespace["append_produced_batch"], signature),
            entry_point(namespace["append_crc_checked_batch"], signature))
