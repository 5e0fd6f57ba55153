"""Java regular expressions (``java.util.regex.Pattern``) run on Python's ``re``.

Spark's Kafka source takes ``subscribePattern`` as a Java regex, so users write Java syntax. This
module translates a Java pattern into an equivalent Python one, construct by construct, and
compiles it; a construct with no translation is refused with a :class:`JavaRegexError` naming it
and its position (never silently matched differently).

Translated: ``\\Q...\\E`` quoting; POSIX and ``java.lang.Character`` classes ``\\p{Lower}``,
``\\p{Alpha}``, ``\\p{Alnum}``, ``\\p{Punct}``, ... and their ``\\P{...}`` negations (ASCII, as in
Java without ``UNICODE_CHARACTER_CLASS``), also inside ``[...]``; inline flags anywhere in the
pattern (``a(?i)b`` turns ``i`` on up to the end of the enclosing group, as Java does; Python
allows global flags only at the start); ``(?<name>...)`` and ``\\k<name>``; ``\\z``, ``\\Z``,
``\\h``, ``\\e``, ``\\x{...}``; a union ``[a-c[x-z]]``. Possessive quantifiers (``a++``, ``a*+``)
and atomic groups ``(?>...)`` are native to Python >= 3.11. ``\\w``, ``\\d``, ``\\s``, ``\\b`` and
case-insensitive matching are ASCII, as in Java by default (``(?U)`` makes them Unicode).

Refused: class intersections (``[a-z&&[^x]]``), negated nested classes, ``\\P{...}`` inside
``[^...]``, ``\\G``, ``\\R``, ``\\X``, ``\\b{g}``, and ``\\p{...}`` names outside the table below.
Kafka topic names are ASCII (``[a-zA-Z0-9._-]``), so the ASCII/Unicode distinctions never change
which topics match.

Cost: one pass over the pattern at option parsing; matching is plain ``re``.
"""

from __future__ import annotations

import re

# \p{Name}: the class body (without brackets), ASCII as in Java's POSIX classes.
_PUNCT = re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_CLASSES = {
    "Lower": "a-z", "Upper": "A-Z", "ASCII": "\\x00-\\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
    "Alnum": "a-zA-Z0-9", "Punct": _PUNCT, "Graph": "a-zA-Z0-9" + _PUNCT, "Print": "a-zA-Z0-9 " + _PUNCT,
    "Blank": " \\t", "Cntrl": "\\x00-\\x1f\\x7f", "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r",
    "javaLowerCase": "a-z", "javaUpperCase": "A-Z", "javaWhitespace": " \\t\\n\\x0b\\f\\r\\x1c-\\x1f",
    "javaDigit": "0-9", "javaLetter": "a-zA-Z", "javaLetterOrDigit": "a-zA-Z0-9",
    "L": "a-zA-Z", "IsL": "a-zA-Z", "IsAlphabetic": "a-zA-Z", "IsLetter": "a-zA-Z", "Lu": "A-Z", "IsLu": "A-Z",
    "Ll": "a-z", "IsLl": "a-z", "IsUppercase": "A-Z", "IsLowercase": "a-z", "N": "0-9", "Nd": "0-9",
    "IsDigit": "0-9", "IsWhite_Space": " \\t\\n\\x0b\\f\\r", "IsPunctuation": _PUNCT, "P": _PUNCT,
    "InBasicLatin": "\\x00-\\x7f", "IsLatin": "a-zA-Z",
}
_SHORT = {"L": "L", "N": "N", "P": "P"}  # \pL, \pN, \pP
_V = "\\n\\x0b\\f\\r\\x85\\u2028\\u2029"
_H = "\\t \\xa0\\u1680\\u180e\\u2000-\\u200a\\u202f\\u205f\\u3000"
_FLAGS = {"i": "i", "m": "m", "s": "s", "x": "x", "U": "u", "u": "", "d": ""}
_REFUSED_ESCAPES = {"G": "\\G (end of the previous match)", "R": "\\R (linebreak matcher)",
                    "X": "\\X (grapheme cluster)"}


class JavaRegexError(ValueError):
    """A pattern Java refuses, or a Java construct with no translation (message says which, where)."""


def compile_java(pattern: str) -> re.Pattern[str]:
    """``pattern`` as Java reads it, compiled with ``re``; raises :class:`JavaRegexError`."""
    translated, unicode = _Translator(pattern).run()
    try:
        return re.compile(translated, 0 if unicode else re.ASCII)
    except re.error as e:
        where = f"near index {e.pos}" if translated == pattern else f"(in its Python form {translated!r})"
        raise JavaRegexError(f"{e.msg} {where}") from None


class _Translator:
    """One left-to-right pass; ``closes`` counts, per open group, the scoped-flag groups to close."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.out: list[str] = []
        self.closes = [0]
        self.unicode = False

    def fail(self, what: str, at: int | None = None) -> JavaRegexError:
        return JavaRegexError(f"{what} near index {self.i if at is None else at}")

    def run(self) -> tuple[str, bool]:
        while self.i < len(self.p):
            c = self.p[self.i]
            if c == "\\":
                self.out.append(self.escape(in_class=False))
            elif c == "[":
                self.out.append(self.char_class())
            elif c == "(":
                self.group()
            elif c == ")":
                self.out.append(")" * self.closes.pop() + ")")
                self.i += 1
                if not self.closes:
                    raise self.fail("Unmatched closing ')'", self.i - 1)
            else:
                self.out.append(c)
                self.i += 1
        if len(self.closes) > 1:
            raise self.fail("Unclosed group", len(self.p))
        return "".join(self.out) + ")" * self.closes[0], self.unicode

    # --- groups and flags ----------------------------------------------------------------

    def group(self) -> None:
        p, i = self.p, self.i
        flags = re.match(r"\(\?([idmsuxU]*)(?:-([idmsuxU]*))?([:)])", p[i:])
        if flags and (flags[1] or flags[2] is not None):
            on, off = self.flags(flags[1]), self.flags(flags[2] or "")
            self.i += flags.end()
            if flags[3] == ":":
                self.out.append(f"(?{on}-{off}:" if off else f"(?{on}:")
                self.closes.append(0)
            elif on or off:  # (?i) applies to the end of the enclosing group
                self.out.append(f"(?{on}-{off}:" if off else f"(?{on}:")
                self.closes[-1] += 1
            return
        name = re.match(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>", p[i:])
        if name:
            self.out.append(f"(?P<{name[1]}>")
            self.i += name.end()
        elif p.startswith("(?", i) and not re.match(r"\(\?(:|=|!|<=|<!|>)", p[i:]):
            raise self.fail(f"Unknown inline modifier '{p[i:i + 3]}'", i)
        else:
            head = re.match(r"\((\?(:|=|!|<=|<!|>))?", p[i:])
            assert head is not None
            self.out.append(head[0])
            self.i += head.end()
        self.closes.append(0)

    def flags(self, letters: str) -> str:
        if "U" in letters:
            self.unicode = True
        return "".join(sorted({_FLAGS[c] for c in letters if _FLAGS[c] and c != "U"}))

    # --- escapes -------------------------------------------------------------------------

    def escape(self, in_class: bool) -> str:
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise self.fail("Unexpected internal error (trailing backslash)", i)
        c = p[i + 1]
        self.i += 2
        if c == "Q":
            end = p.find("\\E", self.i)
            text = p[self.i:] if end < 0 else p[self.i:end]
            self.i = len(p) if end < 0 else end + 2
            return "".join("\\" + ch if not ch.isalnum() else ch for ch in text)
        if c in "pP":
            return self.property(c == "P", in_class, i)
        if c == "k":
            name = re.match(r"<([a-zA-Z][a-zA-Z0-9]*)>", p[self.i:])
            if not name:
                raise self.fail("\\k is not followed by '<' for named capturing group", i)
            self.i += name.end()
            return f"(?P={name[1]})"
        if c == "x" and p.startswith("{", self.i):
            end = p.find("}", self.i)
            if end < 0:
                raise self.fail("Unclosed hexadecimal escape sequence", i)
            code = int(p[self.i + 1:end] or "x", 16) if re.fullmatch(r"[0-9a-fA-F]{1,6}", p[self.i + 1:end]) else -1
            if not 0 <= code <= 0x10FFFF:
                raise self.fail("Illegal hexadecimal escape sequence", i)
            self.i = end + 1
            return f"\\U{code:08x}"
        if c in _REFUSED_ESCAPES or (c == "b" and p.startswith("{", self.i)):
            what = _REFUSED_ESCAPES.get(c, "the grapheme boundary \\b{g}")
            raise self.fail(f"{what} has no Python equivalent", i)
        simple = {"z": "\\Z", "Z": "(?=\\n?\\Z)", "e": "\\x1b", "h": f"[{_H}]", "H": f"[^{_H}]", "v": f"[{_V}]",
                  "V": f"[^{_V}]"}
        if c in simple:
            if in_class and c in "zZHV":
                raise self.fail(f"Illegal/unsupported escape sequence \\{c} in a character class", i)
            return simple[c][1:-1] if in_class and c in "hv" else simple[c]
        if c == "c" and self.i < len(p):
            self.i += 1
            return f"\\x{ord(p[self.i - 1]) ^ 64:02x}"
        return "\\" + c

    def property(self, negated: bool, in_class: bool, at: int) -> str:
        p = self.p
        if p.startswith("{", self.i):
            end = p.find("}", self.i)
            if end < 0:
                raise self.fail("Unclosed character family", at)
            name, self.i = p[self.i + 1:end], end + 1
        elif self.i < len(p) and p[self.i] in _SHORT:
            name, self.i = p[self.i], self.i + 1
        else:
            raise self.fail("Illegal character family", at)
        body = _CLASSES.get(name)
        if body is None:
            raise self.fail(f"Unknown character property name {{{name}}} (no ASCII translation here)", at)
        if in_class:
            if negated:
                raise self.fail(f"\\P{{{name}}} inside a character class has no Python equivalent", at)
            return body
        return f"[^{body}]" if negated else f"[{body}]"

    # --- character classes ---------------------------------------------------------------

    def char_class(self) -> str:
        """``[...]`` from ``self.i``; a nested non-negated class is merged (Java's union)."""
        start = self.i
        p = self.p
        self.i += 1
        out = ["["]
        if p.startswith("^", self.i):
            out.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(p):
                raise self.fail("Unclosed character class", len(p) - 1)
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                return "".join(out) + "]"
            if p.startswith("&&", self.i):
                raise self.fail("a character class intersection (&&) has no Python equivalent", self.i)
            if c == "[":
                if p.startswith("[^", self.i):
                    raise self.fail("a negated class nested in a class has no Python equivalent", self.i)
                inner = self.char_class()
                out.append(inner[1:-1])
            elif c == "\\":
                out.append(self.escape(in_class=True))
            else:
                out.append("\\" + c if c in "&~|" else c)
                self.i += 1
            first = False
            if self.i > len(p):
                raise self.fail("Unclosed character class", start)
