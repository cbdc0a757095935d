"""Questions a chat waits on a person to answer, their fields, and how answers are checked."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Literal

from tarry.errors import InvalidAnswerError
from tarry.messages import ToolCall

FieldType = Literal["string", "number", "integer", "boolean", "array"]
FIELD_TYPES: tuple[FieldType, ...] = ("string", "number", "integer", "boolean", "array")
QuestionKind = Literal["approval", "form", "url"]
QUESTION_KINDS: tuple[QuestionKind, ...] = ("approval", "form", "url")
Decision = Literal["accept", "decline", "cancel"]
DECISIONS: tuple[Decision, ...] = ("accept", "decline", "cancel")
FORMATS = ("email", "uri", "date", "date-time")
_TRUE = ("true", "on", "yes", "1")
_FALSE = ("false", "off", "no", "0")


@dataclass(frozen=True)
class Field:
    """One value a question asks for.

    ``choices`` is a list of allowed values, or a dict of value to title; an ``"array"``
    field picks several of its choices, and ``min_length``/``max_length`` then bound how
    many. The attributes cover what an MCP ``requestedSchema`` can say, so a field maps to
    a JSON schema property and back without loss (:meth:`to_schema`, :meth:`from_schema`).

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
    ) -> None:
        where = f"Field {name!r}" if name else "Field"
        if type not in FIELD_TYPES:
            raise ValueError(f"{where}: type must be one of {', '.join(FIELD_TYPES)}; got {type!r}")
        if choices is not None:
            if isinstance(choices, str) or not isinstance(choices, Sequence | Mapping) or not choices:
                raise ValueError(f"{where}: choices must be a non-empty list or dict, got {choices!r}")
            choices = dict(choices) if isinstance(choices, Mapping) else list(choices)
            if type == "boolean":
                raise ValueError(f"{where}: a boolean field takes no choices")
        if type == "array" and choices is None:
            raise ValueError(f"{where}: an array field needs choices to pick from")
        if format is not None and format not in FORMATS:
            raise ValueError(f"{where}: format must be one of {', '.join(FORMATS)}; got {format!r}")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"{where}: pattern {pattern!r} is not a regular expression: {error}") from None
        for attribute, value in (("min_length", min_length), ("max_length", max_length)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{where}: {attribute} must be a non-negative int, got {value!r}")
        for attribute, bound in (("minimum", minimum), ("maximum", maximum)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
                raise ValueError(f"{where}: {attribute} must be a number, got {bound!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"Field name must be a non-empty str, got {name!r}")
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
        """Turn a web form's strings into this field's type where that is unambiguous."""
        if not isinstance(value, str):
            if self.type == "array" and isinstance(value, tuple):
                return list(value)
            if self.type == "integer" and isinstance(value, float) and value.is_integer():
                return int(value)
            return value
        text = value.strip()
        if self.type == "integer" and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if self.type == "number" and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
            number = float(text)
            return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
        if self.type == "boolean" and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        if self.type == "array":
            return [value]
        return value

    def problem(self, value: Any) -> str | None:
        """What is wrong with an already coerced ``value``, or ``None``."""
        if self.type == "boolean":
            return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
        if self.type == "integer":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                return f"expected an integer, got {value!r}"
            return self._choice_problem(value) or self._bounds_problem(value)
        if self.type == "number":
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                return f"expected a number, got {value!r}"
            return self._choice_problem(value) or self._bounds_problem(value)
        if self.type == "array":
            if not isinstance(value, list):
                return f"expected a list of choices, got {value!r}"
            for item in value:
                problem = self._choice_problem(item)
                if problem:
                    return problem
            if len(set(map(repr, value))) != len(value):
                return "each choice can be picked once"
            return self._length_problem(len(value), "items")
        if not isinstance(value, str):
            return f"expected text, got {value!r}"
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
        return f"{value!r} is not one of the choices ({options})"

    def _bounds_problem(self, value: float) -> str | None:
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        if self.maximum is not None and value > self.maximum:
            return f"must be at most {self.maximum:g}, got {value!r}"
        return None

    def _length_problem(self, length: int, unit: str) -> str | None:
        if self.min_length is not None and length < self.min_length:
            return f"needs at least {self.min_length} {unit}, got {length}"
        if self.max_length is not None and length > self.max_length:
            return f"takes at most {self.max_length} {unit}, got {length}"
        return None

    def _pattern_problem(self, value: str) -> str | None:
        if self.pattern is None or re.search(self.pattern, value):
            return None
        return f"{value!r} does not match the pattern {self.pattern!r}"

    def _format_problem(self, value: str) -> str | None:
        valid = {
            None: lambda text: True,
            "email": lambda text: re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", text) is not None,
            "uri": lambda text: re.match(r"[A-Za-z][A-Za-z0-9+.-]*:\S+$", text) is not None,
            "date": _is_date,
            "date-time": _is_datetime,
        }[self.format](value)
        return None if valid else f"{value!r} is not a valid {self.format}"

    def to_schema(self) -> dict[str, Any]:
        """This field as a JSON schema property, in the shapes an MCP ``requestedSchema`` uses."""
        schema: dict[str, Any] = {"type": self.type}
        choices = self.choices
        if self.type == "array":
            schema["items"] = _choices_schema(choices, "anyOf")
            _put(schema, minItems=self.min_length, maxItems=self.max_length)
        else:
            if choices is not None:
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
        )


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


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return "T" in text or " " in text


@dataclass(eq=False)
class Question:
    """Something a chat waits on a person for: an approval, a form, or a URL to visit.

    The ``id`` is minted when the pause is recorded and never reused. ``decision`` is
    ``None`` until someone decides: ``"accept"`` (with ``answer``, the accepted values),
    ``"decline"`` (with an optional ``note``) or ``"cancel"``.
    """

    id: str
    kind: QuestionKind
    message: str
    fields: tuple[Field, ...] = ()
    url: str | None = None
    tool_call: ToolCall | None = None
    expires_at: datetime | None = None
    asked_at: datetime | None = None
    chat_id: str | None = None
    decision: Decision | None = None
    answer: dict[str, Any] | None = None
    note: str | None = None
    decided_at: datetime | None = None
    source: str | None = None
    """Who asked: ``None`` for tarry's approvals and tools' own questions, the MCP server's name otherwise."""
    key: str | None = None
    """The protocol's name for this question (an MCP input request key), when it has one."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Protocol state that travels with the question (kept verbatim, never shown)."""
    ttl: float | None = None
    """Seconds the question stays open once recorded; the chat sets ``expires_at`` from it."""

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(f"Question kind must be one of {', '.join(QUESTION_KINDS)}; got {self.kind!r}")
        self.fields = tuple(self.fields)
        names = [item.name for item in self.fields]
        if None in names or len(set(names)) != len(names):
            raise ValueError(f"Question fields need unique names, got {names!r}")
        if self.kind == "url" and not self.url:
            raise ValueError("A URL question needs a url")
        if self.kind != "form" and self.fields:
            raise ValueError(f"A {self.kind} question has no fields")

    @property
    def decided(self) -> bool:
        """True once someone decided the question."""
        return self.decision is not None

    def expired(self, now: datetime) -> bool:
        """True when nobody decided the question before its time to live ran out."""
        return self.decision is None and self.expires_at is not None and now >= self.expires_at

    @property
    def requested_schema(self) -> dict[str, Any]:
        """The question's fields as a JSON schema object, as an MCP elicitation carries them."""
        return {
            "type": "object",
            "properties": {item.name: item.to_schema() for item in self.fields},
            "required": [item.name for item in self.fields if item.required],
        }

    def check_answer(self, value: Any = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The values an answer records, after dropping unasked fields and filling defaults.

        A positional ``value`` answers a one-field question (or, as a dict, names fields like
        ``values``). Raises :class:`InvalidAnswerError` naming each field that is wrong.
        """
        given = dict(values or {})
        if isinstance(value, Mapping):
            given = {**value, **given}
            value = None
        if value is not None:
            if len(self.fields) != 1:
                what = "an approval" if self.kind == "approval" else f"a question with {len(self.fields)} fields"
                raise InvalidAnswerError({"value": f"{what} takes no single value; name the fields"})
            name = self.fields[0].name
            assert name is not None
            given[name] = value
        accepted: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for item in self.fields:
            assert item.name is not None
            raw = given.get(item.name)
            if raw is None or raw == "" or raw == []:
                if item.default is not None:
                    accepted[item.name] = item.default
                elif item.required:
                    errors[item.name] = "a value is required"
                continue
            try:
                accepted[item.name] = item.check(raw)
            except ValueError as error:
                errors[item.name] = str(error)
        if errors:
            raise InvalidAnswerError(errors)
        return accepted

    def to_dict(self) -> dict[str, Any]:
        """The question as JSON-safe data (times as ISO 8601 text)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "message": self.message,
            "requested_schema": self.requested_schema,
            "url": self.url,
            "tool_call": None
            if self.tool_call is None
            else {
                "id": self.tool_call.id,
                "name": self.tool_call.name,
                "arguments": dict(self.tool_call.arguments),
            },
            "expires_at": _iso(self.expires_at),
            "asked_at": _iso(self.asked_at),
            "chat_id": self.chat_id,
            "decision": self.decision,
            "answer": self.answer,
            "note": self.note,
            "decided_at": _iso(self.decided_at),
            "source": self.source,
        }


def fields_from_schema(schema: Mapping[str, Any]) -> tuple[Field, ...]:
    """The fields of a JSON schema object such as an MCP ``requestedSchema``."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return tuple(Field.from_schema(name, item, required=name in required) for name, item in properties.items())


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
