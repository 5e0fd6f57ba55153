"""Java ``.properties`` text, as ``Properties.load`` reads and ``Properties.store`` writes it.

Used for ``server.properties`` and ``meta.properties``: ``#``/``!`` comments, ``=``, ``:`` or
whitespace separators, trailing-backslash continuations, and ``\\t \\n \\uXXXX`` escapes.
Errors name the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tidelog.errors import ConfigError
from tidelog.storage.atomic import read_file


_PROPERTIES_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_STORE_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "=": "\\=", ":": "\\:", "#": "\\#",
                  "!": "\\!", "\\": "\\\\"}


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` of ``text``: comments, separators, continuations, escapes."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[_unescape(key, number)] = _unescape(value, number)
    return props


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, logical line) pairs: comments and blank lines dropped, continuations joined."""
    pending: str | None = None
    start = 0
    for number, natural in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        line = natural.lstrip(_PROPERTIES_WHITESPACE)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending, start = "", number
        if _ends_with_odd_backslashes(line):
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = None
    if pending is not None:
        yield start, pending


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped ``=``, ``:`` or whitespace; one separator may follow whitespace."""
    escaped, end, value_start, has_separator = False, len(line), len(line), False
    for i, ch in enumerate(line):
        if not escaped and ch in "=:":
            end, value_start, has_separator = i, i + 1, True
            break
        if not escaped and ch in _PROPERTIES_WHITESPACE:
            end, value_start = i, i + 1
            break
        escaped = ch == "\\" and not escaped
    while value_start < len(line):
        ch = line[value_start]
        if ch not in _PROPERTIES_WHITESPACE:
            if has_separator or ch not in "=:":
                break
            has_separator = True
        value_start += 1
    return line[:end], line[value_start:]


def _unescape(text: str, line_number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 1
        if ch != "\\" or i >= len(text):
            out.append(ch)
            continue
        ch = text[i]
        i += 1
        if ch == "u":
            digits = text[i:i + 4]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError("Malformed \\uxxxx encoding in properties", line_number=line_number, text=text)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    return _join_surrogates("".join(out))


def _join_surrogates(text: str) -> str:
    """Combine UTF-16 surrogate pairs produced by ``\\uD83D\\uDE00``-style escapes."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def format_properties(props: Mapping[str, str], comments: Iterable[str] = ()) -> str:
    """Java ``Properties.store`` text: ``#comment`` lines, then ``key=value`` lines sorted by key
    (JDK 18+ order), with Java's escaping and ``\\uXXXX`` for anything outside printable ASCII."""
    lines = [f"#{_escape_comment(comment)}" for comment in comments]
    lines += [f"{_escape(key, escape_space=True)}={_escape(props[key], escape_space=False)}" for key in sorted(props)]
    return "".join(f"{line}\n" for line in lines)


def _escape(text: str, *, escape_space: bool) -> str:
    """Java's ``saveConvert``: keys escape every space, values only a leading one."""
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if escape_space or i == 0 else " ")
        elif ch in _STORE_ESCAPES:
            out.append(_STORE_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(_unicode_escape(ch))
    return "".join(out)


def _escape_comment(text: str) -> str:
    """Comments come from our own code (a date line), so a line break is a caller's bug: ValueError."""
    if "\n" in text or "\r" in text:
        raise ValueError(f"a properties comment must be one line, got {text!r}")
    return "".join(ch if " " <= ch <= "~" else _unicode_escape(ch) for ch in text)


def _unicode_escape(ch: str) -> str:
    units = ch.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{units[i]:02X}{units[i + 1]:02X}" for i in range(0, len(units), 2))


def read_properties_file(path: Path) -> dict[str, str]:
    """Parse a properties file (UTF-8, falling back to ISO-8859-1 as Java reads it)."""
    data = read_file(path, "properties file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        return parse_properties(text)
    except ConfigError as e:
        raise ConfigError(e.message, path=path, **e.context) from e
