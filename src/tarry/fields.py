"""A question's fields: what each one takes, and how an answer's value is coerced and checked.

Coercion is pydantic's lax mode (``"3"`` for an integer, ``"true"`` for a boolean); formats are
checked by maintained validators (``email-validator``, pydantic's URL, date and date-time
parsers); patterns are ECMA-262 regular expressions, as JSON Schema defines them, checked in
linear time by RE2 (``tarry.patterns``). Every check says what was wrong in a sentence a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Annotated, Any, Literal

import email_validator
from pydantic import AnyUrl, Strict, TypeAdapter, ValidationError
from pydantic import Field as Constraint

from tarry.patterns import ecma_pattern
from tarry.text import unstorable

FieldType = Literal["string", "number", "integer", "boolean", "array"]
"""The JSON Schema type of a field's value."""
FIELD_TYPES: tuple[FieldType, ...] = ("string", "number", "integer", "boolean", "array")
FORMATS = ("email", "uri", "date", "date-time")
"""The formats a string field may check, as JSON Schema names them."""
DEFAULT_MAX_LENGTH = 10_000
"""The most characters a string field takes when it sets no ``max_length`` of its own."""
_BOOLEAN_WORDS = ("true", "on", "yes", "1", "false", "off", "no", "0")

_COERCERS: dict[FieldType, TypeAdapter[Any]] = {
    "string": TypeAdapter(Annotated[str, Strict()]),  # bytes or numbers are not text
    "integer": TypeAdapter(int),
    "number": TypeAdapter(int | Annotated[float, Constraint(allow_inf_nan=False)]),
    "boolean": TypeAdapter(bool),
    "array": TypeAdapter(list[Any]),
}
_EXPECTED = {
    "string": "expected text",
    "integer": "expected an integer",
    "number": "expected a number",
    "boolean": "expected true or false",
    "array": "expected a list of choices",
}
_URI = TypeAdapter(AnyUrl)
_DATE = TypeAdapter(date)
_DATETIME = TypeAdapter(datetime)


def _valid_email(text: str) -> bool:
    if len(text) > 254:  # the longest address SMTP can carry (RFC 5321); longer is not worth parsing
        return False
    try:
        email_validator.validate_email(text, check_deliverability=False)
    except email_validator.EmailNotValidError:
        return False
    return True


def _valid_uri(text: str) -> bool:
    # The URL parser forgives what browsers forgive (spaces, a missing scheme's slashes); a URI may not.
    if any(character.isspace() or ord(character) < 32 for character in text) or ":" not in text:
        return False
    try:
        _URI.validate_python(text)
    except ValidationError:
        return False
    return True


def _parses(adapter: TypeAdapter[Any]) -> Callable[[str], bool]:
    def valid(text: str) -> bool:
        try:
            adapter.validate_json(json.dumps(text), strict=True)
        except ValidationError:
            return False
        return True

    return valid


def _valid_datetime(text: str) -> bool:
    # A date alone parses as midnight; a date-time must say the time.
    return len(text) > 10 and _parses(_DATETIME)(text)


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "email": _valid_email,
    "uri": _valid_uri,
    "date": _parses(_DATE),
    "date-time": _valid_datetime,
}


@dataclass(frozen=True)
class Field:
    """One value a question asks for.

    ``choices`` is a list of allowed values, or a dict of value to title; an ``"array"``
    field picks several of its choices, and ``min_length``/``max_length`` then bound how
    many. A single choice with titles is written as ``oneOf``; ``legacy_titles`` writes it as
    ``enum`` with ``enumNames`` instead, the form deprecated in MCP 2025-11-25 that older peers
    still send and read. A string field without ``max_length`` takes at most
    [`DEFAULT_MAX_LENGTH`][tarry.fields.DEFAULT_MAX_LENGTH] characters. ``pattern`` is an ECMA-262 regular expression,
    searched for anywhere in the value as JSON Schema says (anchor it with ``^…$``). The attributes cover what an MCP
    ``requestedSchema`` can say, so a field maps to a JSON schema property and back without
    loss ([`to_schema`][tarry.Field.to_schema], [`from_schema`][tarry.Field.from_schema]). A ``secret`` field (a
    password, a one-time code) is checked and handed to the tool like any other, but kept out of the audit trail
    and of logs (its schema says ``writeOnly``).

    >>> Field("integer", minimum=1, maximum=5).check("3")
    3
    """

    type: FieldType = "string"
    required: bool = True
    choices: Sequence[Any] | Mapping[Any, str] | None = None
    default: Any = None
    title: str | None = None
    description: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    format: str | None = None
    name: str | None = None
    secret: bool = False
    legacy_titles: bool = False

    def __init__(
        self,
        type: FieldType = "string",
        *,
        required: bool = True,
        choices: Sequence[Any] | Mapping[Any, str] | None = None,
        default: Any = None,
        title: str | None = None,
        description: str | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        pattern: str | None = None,
        format: str | None = None,
        name: str | None = None,
        secret: bool = False,
        legacy_titles: bool = False,
    ) -> None:
        where = f"Field {name!r}" if name else "Field"
        _check_type(where, type)
        choices = _checked_choices(where, type, choices)
        _check_choice_kind(where, type, choices, legacy_titles)
        _check_format(where, format)
        _check_pattern(where, pattern)
        _check_lengths(where, min_length, max_length)
        _check_bounds(where, minimum, maximum)
        _check_name(name)
        values = {
            "type": type,
            "required": bool(required),
            "choices": choices,
            "default": default,
            "title": title,
            "description": description,
            "minimum": minimum,
            "maximum": maximum,
            "min_length": min_length,
            "max_length": max_length,
            "pattern": pattern,
            "format": format,
            "name": name,
            "secret": bool(secret),
            "legacy_titles": bool(legacy_titles),
        }
        for attribute, value in values.items():
            object.__setattr__(self, attribute, value)
        if default is not None:
            problem = self.problem(default)
            if problem:
                raise ValueError(f"{where}: default {default!r} is invalid: {problem}")

    def named(self, name: str) -> Field:
        """This field under ``name``."""
        return replace(self, name=name)

    @property
    def label(self) -> str:
        """What a form shows beside the input: the title, else the name."""
        return self.title or self.name or ""

    @property
    def choice_values(self) -> list[Any]:
        """The allowed values, without their titles."""
        return list(self.choices or ())

    @property
    def length_limit(self) -> int | None:
        """The most characters (or, for an array, items) the field takes: ``max_length`` or the default."""
        if self.max_length is not None or self.type != "string":
            return self.max_length
        return DEFAULT_MAX_LENGTH

    def choice_title(self, value: Any) -> str:
        """The title shown for one of the choices."""
        if isinstance(self.choices, Mapping):
            return str(self.choices.get(value, value))
        return str(value)

    def check(self, value: Any) -> Any:
        """``value`` coerced to this field's type; raises ``ValueError`` naming what is wrong."""
        coerced = self.coerce(value)
        problem = self.problem(coerced)
        if problem:
            raise ValueError(problem)
        return coerced

    def coerce(self, value: Any) -> Any:
        """Turn a web form's strings into this field's type where that is unambiguous.

        A value that cannot be coerced is returned as it is, for [`problem`][tarry.Field.problem] to name.
        """
        if self.type == "array" and isinstance(value, str):
            return [value]
        if isinstance(value, bool) and self.type != "boolean":
            return value  # a bool is never a number, and never text
        if self.type == "boolean" and not (isinstance(value, bool) or _boolean_word(value)):
            return value
        if self.type in ("integer", "number", "boolean") and isinstance(value, str):
            value = value.strip()
        try:
            return _COERCERS[self.type].validate_python(value)
        except ValidationError:
            return value

    def problem(self, value: Any) -> str | None:
        """What is wrong with an already coerced ``value``, or ``None``."""
        if not _has_type(self.type, value):
            return f"{_EXPECTED[self.type]}, got {_shown(value)}"
        if self.type == "boolean":
            return None
        if self.type in ("integer", "number"):
            return self._choice_problem(value) or self._bounds_problem(value)
        if self.type == "array":
            for item in value:
                problem = self._choice_problem(item)
                if problem:
                    return problem
            if len(set(map(repr, value))) != len(value):
                return "each choice can be picked once"
            return self._length_problem(len(value), "items")
        held = unstorable(value)
        if held is not None:
            return f"cannot hold {held}"
        return (
            self._choice_problem(value)
            or self._length_problem(len(value), "characters")
            or self._pattern_problem(value)
            or self._format_problem(value)
        )

    def _choice_problem(self, value: Any) -> str | None:
        if self.choices is None or value in self.choice_values:
            return None
        options = ", ".join(repr(choice) for choice in self.choice_values)
        return f"{_shown(value)} is not one of the choices ({options})"

    def _bounds_problem(self, value: float) -> str | None:
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum:g}, got {value!r}"
        return None

    def _length_problem(self, length: int, unit: str) -> str | None:
        if self.min_length is not None and length < self.min_length:
            return f"needs at least {self.min_length} {unit}, got {length}"
        limit = self.length_limit
        if limit is not None and length > limit:
            return f"takes at most {limit} {unit}, got {length}"
        return None

    def _pattern_problem(self, value: str) -> str | None:
        if self.pattern is None or ecma_pattern(self.pattern).search(value):
            return None
        return f"{_shown(value)} does not match the pattern {self.pattern!r}"

    def _format_problem(self, value: str) -> str | None:
        if self.format is None or _FORMAT_CHECKS[self.format](value):
            return None
        return f"{_shown(value)} is not a valid {self.format}"

    def to_schema(self) -> dict[str, Any]:
        """This field as a JSON schema property, in the shapes an MCP ``requestedSchema`` uses."""
        schema: dict[str, Any] = {"type": self.type}
        choices = self.choices
        if self.type == "array":
            schema["items"] = _choices_schema(choices, "anyOf")
            _put(schema, minItems=self.min_length, maxItems=self.max_length)
        else:
            if self.legacy_titles and isinstance(choices, Mapping):
                schema.update({"enum": list(choices), "enumNames": list(choices.values())})
            elif choices is not None:
                schema.update({**_choices_schema(choices, "oneOf"), "type": self.type})
            _put(schema, minLength=self.min_length, maxLength=self.max_length)
        _put(
            schema,
            title=self.title,
            description=self.description,
            minimum=self.minimum,
            maximum=self.maximum,
            pattern=self.pattern,
            format=self.format,
            default=self.default,
        )
        if self.secret:  # JSON Schema's word for a value that is sent but never shown back
            schema["writeOnly"] = True
        return schema

    @classmethod
    def from_schema(cls, name: str, schema: Mapping[str, Any], *, required: bool = True) -> Field:
        """The field a JSON schema property describes; raises ``ValueError`` for one it cannot."""
        if not isinstance(schema, Mapping):
            raise ValueError(f"Field {name!r}: schema must be an object, got {schema!r}")
        kind = schema.get("type", "string")
        items = schema.get("items")
        choices: Any = None
        if kind == "array":
            if not isinstance(items, Mapping):
                raise ValueError(f"Field {name!r}: an array schema needs items with choices")
            choices = _choices_from_schema(items)
        else:
            choices = _choices_from_schema(schema)
        lengths = ("minItems", "maxItems") if kind == "array" else ("minLength", "maxLength")
        return cls(
            kind,
            required=required,
            choices=choices,
            default=schema.get("default"),
            title=schema.get("title"),
            description=schema.get("description"),
            minimum=schema.get("minimum"),
            maximum=schema.get("maximum"),
            min_length=schema.get(lengths[0]),
            max_length=schema.get(lengths[1]),
            pattern=schema.get("pattern"),
            format=schema.get("format"),
            name=name,
            secret=schema.get("writeOnly") is True,
            legacy_titles=kind != "array" and "enumNames" in schema,
        )


def fields_from_schema(schema: Mapping[str, Any]) -> tuple[Field, ...]:
    """The fields of a JSON schema object such as an MCP ``requestedSchema``."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return tuple(Field.from_schema(name, item, required=name in required) for name, item in properties.items())


def _check_type(where: str, kind: Any) -> None:
    if kind not in FIELD_TYPES:
        raise ValueError(f"{where}: type must be one of {', '.join(FIELD_TYPES)}; got {kind!r}")


def _checked_choices(where: str, kind: FieldType, choices: Any) -> list[Any] | dict[Any, str] | None:
    """``choices`` as a fresh list or dict, or ``None`` for a field without them."""
    if choices is None:
        return None
    if isinstance(choices, str) or not isinstance(choices, Sequence | Mapping) or not choices:
        raise ValueError(f"{where}: choices must be a non-empty list or dict, got {choices!r}")
    if kind == "boolean":
        raise ValueError(f"{where}: a boolean field takes no choices")
    return dict(choices) if isinstance(choices, Mapping) else list(choices)


def _check_choice_kind(where: str, kind: FieldType, choices: Any, legacy_titles: bool) -> None:
    if legacy_titles and (kind == "array" or not isinstance(choices, dict)):
        raise ValueError(f"{where}: legacy_titles needs a single choice with titles (a dict of choices)")
    if kind == "array" and choices is None:
        raise ValueError(f"{where}: an array field needs choices to pick from")


def _check_format(where: str, format: Any) -> None:
    if format is not None and format not in FORMATS:
        raise ValueError(f"{where}: format must be one of {', '.join(FORMATS)}; got {format!r}")


def _check_pattern(where: str, pattern: Any) -> None:
    if pattern is None:
        return
    if not isinstance(pattern, str):
        raise ValueError(f"{where}: pattern must be a str, got {pattern!r}")
    try:
        ecma_pattern(pattern)
    except ValueError as error:
        raise ValueError(f"{where}: pattern {pattern!r} is refused: {error}") from None


def _check_lengths(where: str, min_length: Any, max_length: Any) -> None:
    for attribute, value in (("min_length", min_length), ("max_length", max_length)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{where}: {attribute} must be a non-negative int, got {value!r}")


def _check_bounds(where: str, minimum: Any, maximum: Any) -> None:
    for attribute, bound in (("minimum", minimum), ("maximum", maximum)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise ValueError(f"{where}: {attribute} must be a number, got {bound!r}")


def _check_name(name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"Field name must be a non-empty str, got {name!r}")


def _boolean_word(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS


def _has_type(kind: FieldType, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int)
    if kind == "number":
        return isinstance(value, int | float) and value == value and value not in (float("inf"), float("-inf"))
    if kind == "array":
        return isinstance(value, list)
    return isinstance(value, str)


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut short: an error message never repeats a whole long answer."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _put(schema: dict[str, Any], **values: Any) -> None:
    schema.update({key: value for key, value in values.items() if value is not None})


def _choices_schema(choices: Any, titled_key: str) -> dict[str, Any]:
    if isinstance(choices, Mapping):
        return {titled_key: [{"const": value, "title": title} for value, title in choices.items()]}
    return {"type": "string", "enum": list(choices)}


def _choices_from_schema(schema: Mapping[str, Any]) -> list[Any] | dict[Any, str] | None:
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return {option["const"]: option.get("title", str(option["const"])) for option in schema[key]}
    if "enum" in schema:
        if "enumNames" in schema:
            return dict(zip(schema["enum"], schema["enumNames"], strict=True))
        return list(schema["enum"])
    return None
