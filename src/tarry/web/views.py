"""What the page shows for each question, field and task: widgets, hints, times."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import idna

from tarry.approvals import standing
from tarry.questions import Field, Question
from tarry.store.outbox import DeliveryRecord
from tarry.store.waiting import WaitingTask
from tarry.web.decisions import safe_url
from tarry.web.edit_form import ArgumentInput, argument_inputs

FIELD_PREFIX = "field:"
"""Form inputs are named ``field:<name>`` so a field can never clash with the form's own inputs."""
SHOWN_PREFIX = "shown:"
"""A hidden ``shown:<name>`` input marks a boolean's checkbox, so an unticked box answers ``false``."""
RADIO_LIMIT = 4
"""Up to this many choices are radios; more are a select."""
INPUT_TYPES = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}
FORMAT_HINTS = {"email": "an email address", "uri": "a URL", "date": "a date", "date-time": "a date and time"}
HIDDEN = ("Cf", "Cc", "Zl", "Zp", "Co", "Cs", "Cn")
"""Unicode categories of characters that do not show, reorder the text around them, or break lines unseen."""
FILLERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u3164\uffa0")
"""Characters of other categories that show as nothing (Unicode's default-ignorable letters and marks)."""


@dataclass
class Option:
    """One choice of a field."""

    value: str
    title: str
    selected: bool


@dataclass
class FieldView:
    """One field as the form renders it."""

    field: Field
    input_name: str
    input_id: str
    widget: str
    """``text``, ``textarea``, ``number``, ``checkbox``, ``radios``, ``select`` or ``checkboxes``."""
    input_type: str
    value: str
    options: list[Option]
    hint: str
    error: str | None
    checked: bool = False

    @property
    def label(self) -> str:
        """The label: the field's title, else its name."""
        return self.field.label


@dataclass
class LinkView:
    """A URL question's link as the card shows it: hidden characters made visible, the host in ASCII, warnings."""

    shown: str
    href: str
    """The URL to open, its hidden characters percent-encoded (as a browser would send them)."""
    host: str
    warnings: list[str]


@dataclass
class QuestionView:
    """One question card."""

    question: Question
    fields: list[FieldView]
    arguments: str
    link_allowed: bool
    link: LinkView | None = None
    errors: dict[str, str] = field(default_factory=dict)
    note: str = ""
    standing: str | None = None
    """The approval's policy and the approvals so far, in words (``None`` without a policy)."""
    cannot_approve: str | None = None
    """Why the person looking may not approve it (then no Approve button), or ``None``."""
    cannot_decline: str | None = None
    """Why the person looking may not decline it (then no Decline form), or ``None``."""
    edits: list[ArgumentInput] = field(default_factory=list)
    """The inputs of the parameters a person may change while approving (none when its tool lets none change)."""
    asked: str | None = None
    """The arguments as the model sent them, when a person changed what the approval proposes (``arguments``)."""
    deliveries: list[DeliveryRecord] = field(default_factory=list)
    """Who was notified of the question and when: its notices' deliveries, oldest first (none on a link's page)."""

    @property
    def dom_id(self) -> str:
        """The card's element id."""
        return f"q-{self.question.id}"


@dataclass
class TaskView:
    """One working task."""

    waiting: WaitingTask
    arguments: str


PAGE_SIZE = 50
"""Questions on one page of the inbox, and in a response of ``GET /api/questions`` that sets no ``limit``."""


def hidden(character: str) -> bool:
    """True for a character that shows as nothing or reorders the text around it (newlines and tabs show)."""
    if character in "\n\t":
        return False
    return unicodedata.category(character) in HIDDEN or character in FILLERS or 0xE0100 <= ord(character) <= 0xE01EF


def visible(text: str) -> str:
    """``text`` with characters that are invisible or reorder text (a right-to-left override, say)
    written as ``\\uXXXX`` (``\\UXXXXXXXX`` past U+FFFF), so nothing can disguise what is shown."""
    return "".join(_escaped(c) if hidden(c) else c for c in text)


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON for people to read, letters as they are, hidden characters escaped."""
    return visible(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str))


def field_views(
    question: Question, typed: Mapping[str, Sequence[str]] | None = None, errors: Mapping[str, str] | None = None
) -> list[FieldView]:
    """The fields of ``question`` as the form renders them, with ``typed`` values kept over defaults."""
    errors = errors or {}
    views = []
    for index, item in enumerate(question.fields):
        assert item.name is not None
        input_name = FIELD_PREFIX + item.name
        values = list(typed.get(input_name, ())) if typed is not None else None
        views.append(_field_view(item, input_name, f"q-{question.id}-f{index}", values, errors.get(item.name)))
    return views


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _field_view(item: Field, input_name: str, input_id: str, typed: list[str] | None, error: str | None) -> FieldView:
    current = typed if typed is not None else _default_values(item)
    options = [
        Option(_as_text(value), item.choice_title(value), _as_text(value) in current) for value in item.choice_values
    ]
    widget, input_type = _widget(item, len(options))
    value = current[-1] if current and not item.secret else ""  # a secret is never echoed back into the page
    return FieldView(
        field=item,
        input_name=input_name,
        input_id=input_id,
        widget=widget,
        input_type=input_type,
        value=value,
        options=options,
        hint=hint(item),
        error=error,
        checked=item.type == "boolean" and value.lower() in ("true", "on", "yes", "1"),
    )


def _default_values(item: Field) -> list[str]:
    """The field's default as a form holds it: one string per value, none without a default."""
    if item.default is None:
        return []
    if isinstance(item.default, list):
        return [_as_text(value) for value in item.default]
    return [_as_text(item.default)]


def _widget(item: Field, choice_count: int) -> tuple[str, str]:
    """How the field is shown: the widget, and the ``type`` of its input."""
    if item.type == "boolean":
        return "checkbox", "text"
    if item.type == "array":
        return "checkboxes", "text"
    if item.choices is not None:
        return ("radios" if choice_count <= RADIO_LIMIT else "select"), "text"
    if item.type in ("integer", "number"):
        return "number", "number"
    return _text_widget(item)


def _text_widget(item: Field) -> tuple[str, str]:
    """A text field's widget and input type: a password, an input typed for the format, else text or a textarea."""
    if item.secret:  # typed unseen, and never a textarea
        return "text", "password"
    input_type = INPUT_TYPES.get(item.format or "", "text")
    if input_type != "text":
        return "text", input_type
    return ("textarea" if item.max_length is None or item.max_length > 200 else "text"), "text"


def hint(item: Field) -> str:
    """A short line on what the field takes: bounds, lengths, format."""
    parts = []
    if item.type in ("integer", "number"):
        whole = "a whole number" if item.type == "integer" else "a number"
        if item.minimum is not None and item.maximum is not None:
            parts.append(f"{whole} from {item.minimum:g} to {item.maximum:g}")
        elif item.minimum is not None:
            parts.append(f"{whole}, at least {item.minimum:g}")
        elif item.maximum is not None:
            parts.append(f"{whole}, at most {item.maximum:g}")
        else:
            parts.append(whole)
    unit = "choices" if item.type == "array" else "characters"
    if item.min_length is not None and item.max_length is not None:
        parts.append(f"{item.min_length} to {item.max_length} {unit}")
    elif item.min_length is not None:
        parts.append(f"at least {item.min_length} {unit}")
    elif item.max_length is not None:
        parts.append(f"up to {item.max_length} {unit}")
    if item.format:
        parts.append(
            {"email": "an email address", "uri": "a URL", "date": "a date", "date-time": "a date and time"}[item.format]
        )
    if item.pattern:
        parts.append(f"matching {item.pattern}")
    return "; ".join(parts)


def question_view(
    question: Question,
    typed: Mapping[str, Sequence[str]] | None = None,
    errors: Mapping[str, str] | None = None,
    note: str = "",
    refusals: tuple[str | None, str | None] = (None, None),
) -> QuestionView:
    """The card of ``question``; ``refusals``: why the person looking may not approve it, and may not decline it."""
    call = question.tool_call
    proposal = question.proposal
    asked = None if call is None or proposal in (None, dict(call.arguments)) else pretty_json(dict(call.arguments))
    return QuestionView(
        question=question,
        fields=field_views(question, typed, errors),
        arguments=pretty_json(proposal if proposal is not None else dict(call.arguments)) if call is not None else "{}",
        asked=asked,
        edits=argument_inputs(question, typed, errors) if refusals[0] is None else [],
        link_allowed=question.kind == "url" and safe_url(question.url),
        link=link_view(question.url) if question.kind == "url" and question.url else None,
        errors=dict(errors or {}),
        note=note,
        standing=standing(question),
        cannot_approve=refusals[0],
        cannot_decline=refusals[1],
    )


def link_view(url: str) -> LinkView:
    """What a person should see of ``url`` before opening it.

    Characters that reorder or hide text are shown as their code points, the host is given
    in ASCII (punycode) and each look-alike trick found is named in a warning.
    """
    warnings = []
    found = sorted({character for character in url if hidden(character)})
    if found:
        names = ", ".join(f"U+{ord(character):04X}" for character in found)
        warnings.append(f"The link holds invisible characters that can disguise it ({names}); they are shown as [U+…].")
    shown = "".join(f"[U+{ord(c):04X}]" if hidden(c) else c for c in url)
    href = "".join(quote(c) if hidden(c) else c for c in url)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return LinkView(shown, href, "", [*warnings, "The link cannot be read as a URL."])
    ascii_host = _ascii_host(host)
    if parts.username is not None or parts.password is not None:
        warnings.append(f"The part before “@” is not where the link goes: it goes to {ascii_host or 'no host'}.")
    if not host.isascii():
        warnings.append(f"The address uses letters that can look like others; it really goes to {ascii_host}.")
    return LinkView(shown, href, ascii_host, warnings)


def _ascii_host(host: str) -> str:
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        return host.encode("ascii", "backslashreplace").decode("ascii")


def task_view(waiting: WaitingTask) -> TaskView:
    """The row of a working task."""
    call = waiting.task.tool_call
    return TaskView(waiting, pretty_json(dict(call.arguments)) if call is not None else "{}")


def span(seconds: float) -> str:
    """A duration for people: ``"45 s"``, ``"12 min"``, ``"3 h"``, ``"2 days"``."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h"
    days = int(seconds // 86400)
    return f"{days} day" if days == 1 else f"{days} days"


def ago(moment: datetime | None, now: datetime) -> str:
    """``"3 min ago"``."""
    if moment is None:
        return "at an unknown time"
    seconds = (now - moment).total_seconds()
    return "just now" if seconds < 5 else f"{span(seconds)} ago"


def until(moment: datetime, now: datetime) -> str:
    """``"in 9 min"``, or ``"now"`` once passed."""
    seconds = (moment - now).total_seconds()
    return "now" if seconds <= 0 else f"in {span(seconds)}"


def clock(moment: datetime) -> str:
    """``"2026-11-30 14:05 UTC"``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC, for ``<time datetime>``."""
    return moment.astimezone(UTC).isoformat()
