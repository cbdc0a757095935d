"""The inbox's form for approving a call with changed arguments: one input per parameter a person may change,
generated from the schema the question holds (``Question.editable``), and the changes a submitted form makes.

Each input holds the argument the question proposes now: text as it is for a text parameter, JSON for any other.
A hidden ``was:<name>`` input holds what the input showed, so only the inputs a person changed are sent as changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData

from tarry.questions import Question

ARGUMENT_PREFIX = "argument:"
"""A changed argument's input is named ``argument:<name>``, apart from the form's own inputs and a form's fields."""
WAS_PREFIX = "was:"
"""A hidden ``was:<name>`` input holds what ``argument:<name>`` showed."""
JSON_PREFIX = "json:"
"""A hidden ``json:<name>`` input marks a parameter whose input is read as JSON (anything but text)."""


@dataclass(frozen=True)
class ArgumentInput:
    """One parameter a person may change, as the approval's form renders it."""

    name: str
    value: str
    """What the input holds: the typed text after a refused submission, else the proposed argument."""
    was: str
    """What the input showed first: the proposed argument (empty when the call has none)."""
    as_json: bool
    """Whether the input is read as JSON (the parameter is not text)."""
    type_hint: str
    """The parameter's type in words, from its schema."""
    error: str | None = None

    @property
    def input_name(self) -> str:
        """The input's name in the form."""
        return ARGUMENT_PREFIX + self.name


def argument_inputs(
    question: Question, typed: Mapping[str, Sequence[str]] | None = None, errors: Mapping[str, str] | None = None
) -> list[ArgumentInput]:
    """The inputs of ``question``'s approval form, one per parameter its tool lets a person change (none when it
    lets none change), with ``typed`` values and ``errors`` of a refused submission."""
    schema, proposal = question.editable, question.proposal
    if schema is None or proposal is None or question.decision is not None:
        return []
    inputs = []
    for name, parameter in (schema.get("properties") or {}).items():
        as_json = not _text_only(parameter)
        was = "" if name not in proposal else _shown(proposal[name], as_json)
        kept = (typed or {}).get(ARGUMENT_PREFIX + name)
        value = kept[0] if kept else was
        inputs.append(ArgumentInput(name, value, was, as_json, _type_hint(parameter), (errors or {}).get(name)))
    return inputs


def typed_arguments(form: FormData) -> dict[str, list[str]]:
    """What the form's argument inputs held, by input name (to show again after a refused submission)."""
    return {key: [str(value) for value in form.getlist(key)] for key in form if key.startswith(ARGUMENT_PREFIX)}


def changes_of(form: FormData) -> dict[str, Any]:
    """The arguments a submitted form changes: each input whose text differs from what it showed, read as JSON
    where it is marked so (and parses; otherwise as text, for the check to name)."""
    changes: dict[str, Any] = {}
    for key in form:
        if not key.startswith(ARGUMENT_PREFIX):
            continue
        name = key[len(ARGUMENT_PREFIX) :]
        text, was = form.get(key), form.get(WAS_PREFIX + name)
        if not isinstance(text, str) or text == was:
            continue
        changes[name] = _read(text) if form.get(JSON_PREFIX + name) else text
    return changes


def _read(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _types(parameter: Mapping[str, Any]) -> list[str]:
    """The JSON types a parameter's schema allows (its own, or each of ``anyOf``'s)."""
    found = parameter.get("type")
    if isinstance(found, str):
        return [found]
    if isinstance(found, list):
        return [str(item) for item in found]
    return [kind for option in parameter.get("anyOf") or () if isinstance(option, Mapping) for kind in _types(option)]


def _text_only(parameter: Mapping[str, Any]) -> bool:
    """Whether the parameter takes text and nothing else besides null: its input is read as text."""
    kinds = set(_types(parameter)) - {"null"}
    return kinds == {"string"}


def _type_hint(parameter: Mapping[str, Any]) -> str:
    kinds = _types(parameter)
    if not kinds:
        return "JSON"
    words = {"string": "text", "integer": "a whole number", "number": "a number", "boolean": "true or false"}
    return " or ".join(words.get(kind, f"JSON ({kind})") for kind in kinds)


def _shown(value: Any, as_json: bool) -> str:
    if not as_json and isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
