"""Field's own checks: ECMA-262 patterns, maintained format validators, the default length, NUL, the module's names."""

from __future__ import annotations

from typing import Any

import pytest
import regress

import tarry
import tarry.questions
from tarry.fields import DEFAULT_MAX_LENGTH, Field
from tarry.patterns import Pattern
from tests.deadline import finishes


def problem(field: Field, value: Any) -> str | None:
    try:
        field.check(value)
    except ValueError as error:
        return str(error)
    return None


def test_field_lives_in_its_own_module_and_keeps_its_old_names() -> None:
    assert tarry.Field is Field and tarry.questions.Field is Field
    assert tarry.questions.fields_from_schema({"properties": {"a": {"type": "integer"}}})[0] == Field(
        "integer", name="a", required=False
    )


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("^[a-z]{3}$", "abc", True),
        ("^[a-z]{3}$", "abc\n", False),  # Python's $ also matches before a final newline
        (r"^\d+$", "123", True),
        (r"^\d+$", "\u0661\u0662", False),  # ECMA-262 \d is ASCII; Python's is any decimal digit
        (r"^\p{Lu}", "Ärger", True),  # Unicode property escapes, which Python's re lacks
        ("b", "abc", True),  # unanchored: searched anywhere, as JSON Schema says
        (r"^\w+$", "café", False),  # ECMA-262 \w is ASCII even with the u flag
        (r"^[\p{ASCII}]$", "a", True),  # \p{ASCII} within a class: its ranges, not a class nested in it
        (r"^[\p{ASCII}]$", "é", False),
        (r"^[^\p{ASCII}]$", "é", True),
        (r"^[\P{ASCII}x]$", "é", True),
        (r"^[\P{ASCII}x]$", "a", False),
        (r"^[\P{ASCII}x]$", "x]", False),
    ],
)
def test_patterns_have_ecma_262_semantics(pattern: str, value: str, matches: bool) -> None:
    said = problem(Field(pattern=pattern), value)
    assert (said is None) is matches, said
    if not matches:
        assert said is not None and "does not match the pattern" in said


@pytest.mark.parametrize("pattern", ["(?P<name>a)", "(", "a{2,1}"])
def test_a_pattern_that_is_not_ecma_262_is_refused_when_the_field_is_made(pattern: str) -> None:
    with pytest.raises(ValueError, match="ECMA-262"):
        Field(pattern=pattern, name="code")


PATHOLOGICAL = r"^(\w+\s?)*$"
"""Backtracks exponentially: 46 characters froze a backtracking engine for 22 s, 60 would take years."""


def test_a_pattern_that_backtracks_exponentially_is_checked_at_once() -> None:
    printed = finishes(
        f"""
from tarry.fields import Field
field = Field(pattern={PATHOLOGICAL!r}, name="slug")
for value in ("a" * 60 + "!", "word " * 30 + "!", "x" * 9_999 + "!"):
    try:
        field.check(value)
    except ValueError as error:
        print(error)
    else:
        raise AssertionError(value)
assert field.check("tea for two " * 800) == "tea for two " * 800
"""
    )
    assert printed.count("does not match the pattern") == 3


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        ("^(?=.*[0-9]).{8,}$", "lookahead"),
        ("(?<!x)y", "lookbehind"),
        (r"^(a+)\1$", "backreference"),
        (r"(?<word>a)\k<word>", "backreference"),
        ("(?i:abc)", "flags"),
        ("a{2000}", "RE2"),
        (r"\ud800", "lone surrogate"),
    ],
)
def test_a_pattern_that_cannot_be_checked_in_linear_time_is_refused_naming_it(pattern: str, what: str) -> None:
    with pytest.raises(ValueError, match=what) as refused:
        Field(pattern=pattern, name="code")
    assert repr(pattern) in str(refused.value) and "'code'" in str(refused.value)
    with pytest.raises(ValueError, match=what):
        Field.from_schema("code", {"type": "string", "pattern": pattern})


ECMA_CASES = [
    # (pattern, values): each value is checked by RE2 and by regress, which runs ECMA-262 itself.
    (r"^a.c$", ["abc", "a\nc", "a\rc", "a\u2028c", "a\u00e9c", "a\U0001f600c"]),
    (r"^\s+$", [" ", "\t\v\f", "\u00a0", "\ufeff", "\u3000", "\u2029", "\u0085", "\u200b", "x"]),
    (r"^[\S]+$", ["abc", "a b", "\u00a0", "é"]),
    (r"^[^\s\d]+$", ["ab", "a1", "a\u2003"]),
    (r"^[\b]$", ["\b", "b"]),
    (r"\bword\b", ["a word here", "swordfish", "word"]),
    (r"^[^]$", ["x", "\n", ""]),
    (r"^[]$", ["", "x"]),
    (r"^\u{1F600}\ud83d\ude00$", ["\U0001f600\U0001f600", "\U0001f600"]),
    (r"^\x41\u0042\cC\0$", ["AB\x03\x00", "AB"]),
    (r"^[a-c\-\]\[]+$", ["a-]", "b[", "d"]),
    (r"^\p{Lu}\p{Ll}+$", ["Ärger", "ärger"]),
    (r"^\p{Script=Greek}+$", ["αβγ", "abc"]),
    (r"^\P{L}+$", ["123", "a1"]),
    (r"^(?<year>\d{4})-(?:\d{2})$", ["2024-05", "24-05"]),
    (r"^a{2,3}?$|^b*?$", ["aa", "aaaa", "", "bbb"]),
    (r"^[\w.+-]+@\w+\.\w{2,}$", ["ada@example.com", "a b@example.com"]),
    (r"^\/\.\*\?\$\^\|\(\)\{\}$", ["/.*?$^|(){}", "x"]),
    ("^(\u00e9|e)$", ["é", "e", "ee"]),
    ("\\$", ["a\\", "a"]),
]


@pytest.mark.parametrize(("pattern", "values"), ECMA_CASES)
def test_patterns_mean_in_re2_what_they_mean_in_ecma_262(pattern: str, values: list[str]) -> None:
    ecma = regress.Regex(pattern, "u")
    for value in values:
        assert Pattern(pattern).search(value) is (ecma.find(value) is not None), (pattern, value)


@pytest.mark.parametrize(
    ("format", "good", "bad"),
    [
        (
            "email",
            ["ada@example.com", "a.b+c@sub.example.org"],
            ["a@b", "ada@", "@example.com", "a b@example.com", "a" * 250 + "@example.com"],
        ),
        ("uri", ["https://example.com/x?y=1", "urn:isbn:0451450523"], ["no scheme", "http://exa mple.com", "http:"]),
        ("date", ["2026-01-31", "2024-02-29"], ["2026-02-30", "31/01/2026", "2026-1-31", "1700000000"]),
        ("date-time", ["2026-01-31T10:00:00Z", "2026-01-31T10:00:00+02:00", "2026-01-31T10:00"], ["2026-01-31", "x"]),
    ],
)
def test_formats_are_checked_by_maintained_validators(format: str, good: list[str], bad: list[str]) -> None:
    field = Field(format=format)
    for value in good:
        assert problem(field, value) is None, value
    for value in bad:
        said = problem(field, value)
        assert said is not None and f"is not a valid {format}" in said, value


def test_string_fields_without_a_max_length_take_the_default_at_most() -> None:
    assert problem(Field(), "x" * DEFAULT_MAX_LENGTH) is None
    said = problem(Field(), "x" * (DEFAULT_MAX_LENGTH + 1))
    assert said == f"takes at most {DEFAULT_MAX_LENGTH} characters, got {DEFAULT_MAX_LENGTH + 1}"
    assert problem(Field(max_length=50_000), "x" * 20_000) is None
    assert "max_length" not in Field().to_schema() and "maxLength" not in Field().to_schema()
    # A huge e-mail answer is refused by its length, in one pass, before any format check.
    assert "at most" in (problem(Field(format="email"), "a" * 20_000 + "@example.com") or "")


def test_text_cannot_hold_nul_characters_and_messages_quote_long_values_briefly() -> None:
    assert problem(Field(), "a\x00b") == "cannot hold NUL characters"
    said = problem(Field(choices=["a"]), "z" * 5_000)
    assert said is not None and len(said) < 200


@pytest.mark.parametrize(
    ("field", "given", "accepted"),
    [
        (Field("integer"), "+7", 7),
        (Field("number"), " 2.5 ", 2.5),
        (Field("number"), "1e3", 1000.0),
        (Field("boolean"), " Yes ", True),
        (Field("array", choices=[1, 2]), (1, 2), [1, 2]),
    ],
)
def test_coercion_is_pydantic_lax_mode_where_unambiguous(field: Field, given: Any, accepted: Any) -> None:
    value = field.check(given)
    assert value == accepted and type(value) is type(accepted)


@pytest.mark.parametrize(
    ("field", "given"),
    [(Field("integer"), True), (Field("number"), False), (Field("boolean"), 1), (Field("string"), b"bytes")],
)
def test_a_bool_is_never_a_number_and_only_words_are_booleans(field: Field, given: Any) -> None:
    said = problem(field, given)
    assert said is not None and said.startswith("expected")
