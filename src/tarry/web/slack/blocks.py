"""The Block Kit a question becomes in Slack: its message (asked, counted, settled) and its two modals.

Pure data: JSON-ready dicts in Slack's documented Block Kit format, built from a question, with no call to Slack.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tarry.fields import Field
from tarry.notices import NoticeEvent
from tarry.questions import Question

APPROVE = "tarry_approve"
"""The ``action_id`` of the Approve button: accepts the question as it stands."""
DECLINE = "tarry_decline"
"""The ``action_id`` of the Decline button, and the ``callback_id`` of the modal it opens."""
ANSWER = "tarry_answer"
"""The ``action_id`` of the Answer button, and the ``callback_id`` of the form's modal."""
NOTE_BLOCK = "note"
"""The ``block_id`` (and ``action_id``) of the decline modal's note."""
VALUE = "value"
"""The ``action_id`` of each input of the answer modal, whose ``block_id`` is the field's name."""
TEXT_LIMIT = 2900
"""The most characters of a section's text tarry sends (Slack takes 3,000)."""
LABEL_LIMIT = 2000
"""The most characters of an input's label (Slack's limit)."""
_OUTCOMES = {"accept": "Approved", "decline": "Declined", "cancel": "Cancelled", "respond": "Answered with a result"}


def _plain(text: str, limit: int = 150) -> dict[str, Any]:
    return {"type": "plain_text", "text": _cut(text, limit) or " ", "emoji": True}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def summary(question: Question) -> str:
    """One line for notifications and fallbacks: the call and its arguments, or the form's message."""
    call = question.tool_call
    if question.kind == "approval" and call is not None:
        return f"Approve {call.name}({json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)})?"
    return question.message


def _question_blocks(question: Question) -> list[dict[str, Any]]:
    """The question itself: the call and its arguments, or the message a tool or server asked."""
    call = question.tool_call
    if question.kind == "approval" and call is not None:
        arguments = json.dumps(call.arguments, ensure_ascii=False, indent=2, sort_keys=True)
        text = f"*Approve a call of `{call.name}`?*\n{question.message}\n```{arguments}```"
    else:
        text = f"*{question.message}*"
        if question.url:
            text += f"\n<{question.url}>"
    about = f"Chat `{question.chat_id}` · question `{question.id}`"
    if question.expires_at is not None:
        about += f" · expires {_when(question.expires_at)}"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, TEXT_LIMIT)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(about, TEXT_LIMIT)}]},
    ]


def can_approve(question: Question) -> bool:
    """Whether accepting the question as it stands can be right: an approval, a link, or a form needing nothing."""
    return all(not field.required or field.default is not None for field in question.fields)


def _buttons(question: Question) -> dict[str, Any]:
    buttons: list[dict[str, Any]] = []
    if can_approve(question):
        approve = {"type": "button", "action_id": APPROVE, "value": question.id, "style": "primary"}
        buttons.append({**approve, "text": _plain("Approve")})
    if question.fields:
        buttons.append({"type": "button", "action_id": ANSWER, "value": question.id, "text": _plain("Answer")})
    decline = {"type": "button", "action_id": DECLINE, "value": question.id, "style": "danger"}
    buttons.append({**decline, "text": _plain("Decline")})
    return {"type": "actions", "block_id": f"tarry:{question.id}", "elements": buttons}


def _votes(question: Question) -> list[dict[str, Any]]:
    if not question.votes:
        return []
    needed = question.policy.count if question.policy is not None else len(question.votes)
    names = ", ".join(
        vote.principal.label if vote.channel is None else f"{vote.principal.label} ({vote.channel})"
        for vote in question.votes
    )
    text = f"{len(question.votes)} of {needed} approvals: {names}"
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(text, TEXT_LIMIT)}]}]


def outcome_line(question: Question, event: NoticeEvent) -> str:
    """What became of the question, for the settled message: who decided, how, through what and when."""
    verdict = question.verdict
    if verdict is not None:
        line = f"*{_OUTCOMES[verdict.decision]}*"
        if verdict.decision == "accept" and question.fields:
            line = "*Answered*"
        if verdict.by is not None:
            line += f" by {verdict.by.label}"
        if verdict.channel is not None:
            line += f" via {verdict.channel}"
        line += f" at {_when(verdict.at)}"
        if verdict.note:
            line += f"\n> {verdict.note}"
        return line
    if event == "expired":
        return f"*Expired* at {_when(question.expires_at)}: nobody decided in time"
    return "*Cancelled*: the chat no longer waits on this question"


def asked_message(question: Question) -> dict[str, Any]:
    """``text`` and ``blocks`` of the message that asks ``question``, with its buttons (and the votes so far)."""
    blocks = _question_blocks(question) + _votes(question) + [_buttons(question)]
    return {"text": _cut(summary(question), TEXT_LIMIT), "blocks": blocks}


def settled_message(question: Question, event: NoticeEvent) -> dict[str, Any]:
    """``text`` and ``blocks`` of the message once the question is decided, expired or cancelled: no buttons."""
    line = outcome_line(question, event)
    settled = {"type": "section", "text": {"type": "mrkdwn", "text": _cut(line, TEXT_LIMIT)}}
    # A decision several people's approvals made names them all, not only the last one's.
    approvers = _votes(question) if question.decision == "accept" and len(question.votes) > 1 else []
    blocks = [*_question_blocks(question), settled, *approvers]
    return {"text": _cut(f"{summary(question)} {line}", TEXT_LIMIT), "blocks": blocks}


def decline_modal(question: Question, metadata: str) -> dict[str, Any]:
    """The modal the Decline button opens: an optional note, which reaches the model."""
    note = {"type": "plain_text_input", "action_id": NOTE_BLOCK, "multiline": True, "max_length": 3000}
    return {
        "type": "modal",
        "callback_id": DECLINE,
        "private_metadata": metadata,
        "title": _plain("Decline", 24),
        "submit": _plain("Decline", 24),
        "close": _plain("Cancel", 24),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(summary(question), TEXT_LIMIT)}},
            {
                "type": "input",
                "block_id": NOTE_BLOCK,
                "optional": True,
                "label": _plain("Note (why, or what to do instead)", LABEL_LIMIT),
                "element": note,
            },
        ],
    }


def answer_modal(question: Question, metadata: str) -> dict[str, Any]:
    """The modal the Answer button opens: one input per field of the question."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(question.message, TEXT_LIMIT)}}
    ]
    for field in question.fields:
        block: dict[str, Any] = {
            "type": "input",
            "block_id": field.name or "",
            "optional": not field.required,
            "label": _plain(field.label, LABEL_LIMIT),
            "element": field_element(field),
        }
        if field.description:
            block["hint"] = _plain(field.description, LABEL_LIMIT)
        blocks.append(block)
    return {
        "type": "modal",
        "callback_id": ANSWER,
        "private_metadata": metadata,
        "title": _plain("Answer", 24),
        "submit": _plain("Send", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def _option(field: Field, index: int, value: Any) -> dict[str, Any]:
    return {"text": _plain(field.choice_title(value), 75), "value": str(index)}


def field_element(field: Field) -> dict[str, Any]:
    """The Block Kit input element for one field: a select for choices, yes/no buttons, a number or a text input.

    A choice's option carries its index among the field's choices (Slack takes text only, of 150 characters).
    """
    if field.choices:
        options = [_option(field, index, value) for index, value in enumerate(field.choice_values)]
        if field.type == "array":
            element: dict[str, Any] = {"type": "multi_static_select", "action_id": VALUE, "options": options}
            chosen = [options[field.choice_values.index(v)] for v in field.default or () if v in field.choice_values]
            if chosen:
                element["initial_options"] = chosen
            if field.max_length is not None:
                element["max_selected_items"] = field.max_length
            return element
        single: dict[str, Any] = {"type": "static_select", "action_id": VALUE, "options": options}
        if field.default in field.choice_values:
            single["initial_option"] = options[field.choice_values.index(field.default)]
        return single
    if field.type == "boolean":
        return _yes_or_no(field)
    if field.type in ("integer", "number"):
        number: dict[str, Any] = {"type": "number_input", "action_id": VALUE}
        number["is_decimal_allowed"] = field.type == "number"
        limits = (("min_value", field.minimum), ("max_value", field.maximum), ("initial_value", field.default))
        number.update({key: str(bound) for key, bound in limits if bound is not None})
        return number
    return _text_element(field)


def _yes_or_no(field: Field) -> dict[str, Any]:
    options = [{"text": _plain("Yes"), "value": "true"}, {"text": _plain("No"), "value": "false"}]
    element: dict[str, Any] = {"type": "radio_buttons", "action_id": VALUE, "options": options}
    if isinstance(field.default, bool):
        element["initial_option"] = options[0 if field.default else 1]
    return element


def _text_element(field: Field) -> dict[str, Any]:
    if field.format == "email":
        element: dict[str, Any] = {"type": "email_text_input", "action_id": VALUE}
    else:
        element = {"type": "plain_text_input", "action_id": VALUE, "multiline": (field.length_limit or 0) > 200}
        if field.min_length is not None:
            element["min_length"] = field.min_length
        if field.length_limit is not None:
            element["max_length"] = min(field.length_limit, 3000)
    if isinstance(field.default, str) and field.default:
        element["initial_value"] = field.default
    return element


def submitted_values(question: Question, state: dict[str, Any]) -> dict[str, Any]:
    """The answer a submitted answer modal holds (``view.state.values``), by field name, in the field's terms.

    A choice comes back as its index and is read back into the choice's value; a field left empty is left out.
    """
    values: dict[str, Any] = {}
    for field in question.fields:
        name = field.name or ""
        given = (state.get(name) or {}).get(VALUE) or {}
        value = _value_of(field, given)
        if value is not None:
            values[name] = value
    return values


def _value_of(field: Field, given: dict[str, Any]) -> Any:
    choices = field.choice_values
    if "selected_options" in given:
        picked = [_choice(choices, option) for option in given["selected_options"] or ()]
        return picked or None
    if "selected_option" in given:
        option = given["selected_option"]
        if option is None:
            return None
        return _choice(choices, option) if choices else option.get("value")
    value = given.get("value")
    return None if value in (None, "") else value


def _choice(choices: list[Any], option: dict[str, Any]) -> Any:
    index = option.get("value")
    if isinstance(index, str) and index.isdigit() and int(index) < len(choices):
        return choices[int(index)]
    return index  # not one of ours: Field.check names it as a value that is not a choice
