"""A field's ``pattern``: an ECMA-262 regular expression, as JSON Schema defines it, checked in linear time.

``regress`` parses the pattern as ECMA-262 (with the ``u`` flag, as JSON Schema asks) and refuses
what is not one; it backtracks, so it never runs a match (``^(\\w+\\s?)*$`` against 46 characters
took it 22 s). The pattern is then written in RE2's syntax and RE2 matches: its time grows with
the length of the value and of the pattern, never exponentially. What RE2 cannot check in linear
time, backreferences and lookaround, is refused when the pattern is made, with a ``ValueError``
naming it. Every character class and escape is written out so it means in RE2 what it means in
ECMA-262: ``.`` and ``\\s`` take ECMA-262's line terminators and spaces, not RE2's.
"""

from __future__ import annotations

from functools import lru_cache

import re2
import regress

_MAX_CODE_POINT = 0x10FFFF
_LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_SPACES = (  # ECMA-262 WhiteSpace and LineTerminator: what \s takes
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_CONTROL_ESCAPES = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_CATEGORY_NAMES = {  # ECMA-262's long General_Category names RE2 knows by their short ones
    "Letter": "L",
    "Uppercase_Letter": "Lu",
    "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm",
    "Other_Letter": "Lo",
    "Mark": "M",
    "Combining_Mark": "M",
    "Nonspacing_Mark": "Mn",
    "Spacing_Mark": "Mc",
    "Enclosing_Mark": "Me",
    "Number": "N",
    "Decimal_Number": "Nd",
    "digit": "Nd",
    "Letter_Number": "Nl",
    "Other_Number": "No",
    "Punctuation": "P",
    "punct": "P",
    "Connector_Punctuation": "Pc",
    "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe",
    "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po",
    "Symbol": "S",
    "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk",
    "Other_Symbol": "So",
    "Separator": "Z",
    "Space_Separator": "Zs",
    "Line_Separator": "Zl",
    "Paragraph_Separator": "Zp",
    "Other": "C",
    "Control": "Cc",
    "cntrl": "Cc",
    "Format": "Cf",
    "Private_Use": "Co",
    "Unassigned": "Cn",
}
_LINEAR = "which cannot be checked in linear time (tarry checks patterns with RE2)"


class Pattern:
    """One ECMA-262 pattern, ready to search values with; raises ``ValueError`` saying why it cannot take it.

    >>> Pattern("^[a-z]{3}$").search("abc")
    True
    """

    def __init__(self, source: str) -> None:
        try:
            regress.Regex(source, "u")
        except Exception as error:  # regress raises its own error type for a bad pattern
            raise ValueError(f"it is not an ECMA-262 regular expression ({error})") from None
        options = re2.Options()
        options.never_capture = True  # only whether it matches counts
        options.log_errors = False
        try:
            self._compiled = re2.compile(_Translation(source).result(), options)
        except re2.error as error:
            said = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) else error
            raise ValueError(f"RE2, which checks patterns in linear time, cannot run it ({said})") from None

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text`` (JSON Schema's ``pattern`` is not anchored)."""
        return self._compiled.search(text) is not None


@lru_cache(maxsize=512)
def ecma_pattern(source: str) -> Pattern:
    """``source`` compiled as an ECMA-262 regular expression (kept: patterns come back with every answer).

    Raises ``ValueError`` when it is not one, or when it uses what RE2 cannot check (see ``tarry.patterns``).
    """
    return Pattern(source)


class _Translation:
    """An ECMA-262 pattern (already checked by regress) written in RE2's syntax, one atom at a time."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.at = 0

    def result(self) -> str:
        out: list[str] = []
        while self.at < len(self.source):
            out.append(self._atom())
        return "".join(out)

    def _next(self) -> str:
        character = self.source[self.at]
        self.at += 1
        return character

    def _peek(self, text: str) -> bool:
        return self.source.startswith(text, self.at)

    def _atom(self) -> str:
        character = self._next()
        if character == "\\":
            escaped = self._escape(in_class=False)
            return escaped if isinstance(escaped, str) else _literal(escaped)
        if character == "[":
            return self._class()
        if character == "(":
            return self._group()
        if character == "{":  # u-mode allows a brace only as a quantifier: copied as it is
            end = self.source.index("}", self.at)
            quantifier, self.at = self.source[self.at - 1 : end + 1], end + 1
            return quantifier
        if character == ".":
            return "[^" + _ranges(_LINE_TERMINATORS) + "]"
        if character in "^$|)*+?":
            return character
        return _literal(ord(character))

    def _group(self) -> str:
        if not self._peek("?"):
            return "("
        for opening, what in (("?=", "lookahead"), ("?!", "lookahead"), ("?<=", "lookbehind"), ("?<!", "lookbehind")):
            if self._peek(opening):
                raise ValueError(f"it has a {what} ({opening}…), {_LINEAR}")
        if self._peek("?:"):
            self.at += 2
            return "(?:"
        if self._peek("?<"):  # a named group: only whether it matches counts, so the name goes
            self.at = self.source.index(">", self.at) + 1
            return "("
        raise ValueError("it sets flags inside the pattern ((?…:…)), which tarry does not support")

    def _escape(self, *, in_class: bool) -> str | int:
        """After a backslash: RE2 syntax for a class (a ``str``), or the code point the escape stands for."""
        character = self._next()
        if character in "dDwW":
            return "\\" + character
        if character in "sS":
            ranges = _SPACES if character == "s" else _complement(_SPACES)
            return _ranges(ranges) if in_class else "[" + _ranges(ranges) + "]"
        if character in "bB":
            return 0x08 if in_class else "\\" + character
        if character in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[character]
        if character == "c":
            return ord(self._next()) % 32
        if character == "0":
            return 0
        if character.isdigit() or character == "k":
            raise ValueError(f"it has a backreference (\\{character}…), {_LINEAR}")
        if character == "x":
            return self._hex(2)
        if character == "u":
            return self._unicode()
        if character in "pP":
            return self._property(character, in_class=in_class)
        return ord(character)  # a syntax character, "/" or "-"

    def _hex(self, digits: int) -> int:
        value = int(self.source[self.at : self.at + digits], 16)
        self.at += digits
        return value

    def _unicode(self) -> int:
        if self._peek("{"):
            end = self.source.index("}", self.at)
            value, self.at = int(self.source[self.at + 1 : end], 16), end + 1
        else:
            value = self._hex(4)
            if 0xD800 <= value <= 0xDBFF and self._peek("\\u") and not self.source.startswith("\\u{", self.at):
                low = int(self.source[self.at + 2 : self.at + 6], 16)
                if 0xDC00 <= low <= 0xDFFF:  # a pair of escapes is one character under the u flag
                    self.at += 6
                    return 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
        return value

    def _property(self, letter: str, *, in_class: bool) -> str:
        end = self.source.index("}", self.at)
        name, self.at = self.source[self.at + 1 : end], end + 1
        key, _, value = name.rpartition("=")
        if key in ("", "gc", "General_Category"):
            value = _CATEGORY_NAMES.get(value, value)
        elif key not in ("sc", "Script"):
            raise ValueError(f"it has the property escape \\{letter}{{{name}}}, which RE2 does not know")
        if value == "ASCII":  # within a class, its ranges (RE2 nests no class in another)
            ranges = ((0, 0x7F),) if letter == "p" else ((0x80, _MAX_CODE_POINT),)
            return _ranges(ranges) if in_class else "[" + _ranges(ranges) + "]"
        return f"\\{letter}{{{value}}}"

    def _class(self) -> str:
        negated = self._peek("^")
        if negated:
            self.at += 1
        items: list[str] = []
        while not self._peek("]"):
            first = self._class_atom()
            if self._peek("-") and not self.source.startswith("-]", self.at) and isinstance(first, int):
                self.at += 1
                last = self._class_atom()
                assert isinstance(last, int)  # regress refuses a range to or from a class
                items.append(_literal(first) + "-" + _literal(last))
            else:
                items.append(first if isinstance(first, str) else _literal(first))
        self.at += 1
        if not items:  # [] matches nothing, [^] any character
            return "[" + ("" if negated else "^") + _ranges(((0, _MAX_CODE_POINT),)) + "]"
        return "[" + ("^" if negated else "") + "".join(items) + "]"

    def _class_atom(self) -> str | int:
        character = self._next()
        return self._escape(in_class=True) if character == "\\" else ord(character)


def _literal(code_point: int) -> str:
    """One character as RE2 reads it literally anywhere, in a class or not."""
    if 0xD800 <= code_point <= 0xDFFF:
        raise ValueError(f"it has a lone surrogate (U+{code_point:04X}), which no text tarry takes can hold")
    character = chr(code_point)
    return character if character.isascii() and character.isalnum() else f"\\x{{{code_point:X}}}"


def _ranges(ranges: tuple[tuple[int, int], ...]) -> str:
    """Code point ranges for inside a class (RE2 leaves out the surrogates a range spans: no text holds them)."""
    return "".join(f"\\x{{{low:X}}}" if low == high else f"\\x{{{low:X}}}-\\x{{{high:X}}}" for low, high in ranges)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    gaps, start = [], 0
    for low, high in ranges:
        if low > start:
            gaps.append((start, low - 1))
        start = high + 1
    return (*gaps, (start, _MAX_CODE_POINT))
