"""Kafka's message fields, read front to back (the encoding Kafka's JSON schemas generate):
big-endian ints, unsigned varints, strings, bytes and array counts in their classic form (int16
or int32 length, -1 for null) or, once ``flexible``, their compact form (uvarint length + 1, 0 for
null), and tagged fields. One reader for what tidelog decodes by hand: ``__consumer_offsets`` and
``__transaction_state`` records, KRaft's metadata log. Input that ends early raises
``struct.error`` naming the position; invalid UTF-8 ``UnicodeDecodeError``. Not thread-safe (one
reader per message)."""

from __future__ import annotations

import struct

from tidelog.records.varint import decode_unsigned_varint

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class FieldReader:
    """Reads ``data``'s fields in order; ``flexible`` (settable mid-message, after a version
    field) switches strings, bytes and counts to their compact forms."""

    __slots__ = ("_data", "_pos", "flexible")

    def __init__(self, data: bytes | memoryview, flexible: bool = False) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self.flexible = flexible

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes (a view of ``data``)."""
        if n < 0 or self._pos + n > len(self._data):
            raise struct.error(f"need {n} bytes at {self._pos}, have {len(self._data) - self._pos}")
        view = self._data[self._pos:self._pos + n]
        self._pos += n
        return view

    def int8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        value, self._pos = decode_unsigned_varint(self._data, self._pos)
        return int(value)

    def string(self) -> str | None:
        """A nullable string."""
        n = self.uvarint() - 1 if self.flexible else self.int16()
        return None if n < 0 else bytes(self.take(n)).decode()

    def required_string(self) -> str:
        """A string that may not be null (``struct.error`` when it is)."""
        text = self.string()
        if text is None:
            raise struct.error(f"null string at {self._pos}")
        return text

    def bytes_(self) -> bytes:
        """A nullable bytes field, null read as empty."""
        n = self.uvarint() - 1 if self.flexible else self.int32()
        return b"" if n < 0 else bytes(self.take(n))

    def count(self) -> int:
        """An array's length (-1: null)."""
        return self.uvarint() - 1 if self.flexible else self.int32()

    def tags(self) -> dict[int, bytes]:
        """The tagged fields (flexible only; none otherwise), by tag."""
        found: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                found[tag] = bytes(self.take(self.uvarint()))
        return found

    def tagged_fields(self) -> None:
        """Skip the tagged fields (flexible only)."""
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self.take(self.uvarint())
