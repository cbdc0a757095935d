"""The email a delivery becomes: a subject, a plain-text body and an HTML body, with one-click links.

A notice that a question was asked (or reminded, or escalated) carries signed links to decide it; a notice that
it was decided, expired or cancelled says who decided what, or that nobody did.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from html import escape

from tarry.mail.links import LinkAction, LinkSigner
from tarry.notices import Delivery
from tarry.questions import Question

__all__ = ["DELIVERY_HEADER", "compose", "decision_text", "link_actions"]

DELIVERY_HEADER = "X-Tarry-Delivery"
"""The header holding the delivery's id (the ``Message-ID`` is made from it too): a receiver drops a repeat by it."""
LINK_TITLES: dict[LinkAction, str] = {"approve": "Approve", "decline": "Decline", "answer": "Answer"}
PREFIXES = {"asked": "", "reminded": "Reminder: ", "escalated": "Escalated: "}
ENDINGS = {"expired": "Expired", "cancelled": "Cancelled", "decided": "Decided"}
UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Body:
    """A message's subject and its two bodies."""

    subject: str
    text: str
    html: str


def link_actions(question: Question) -> tuple[LinkAction, ...]:
    """The links an email offers for ``question``: approve and decline for an approval, answer and decline for the
    rest."""
    return ("approve", "decline") if question.kind == "approval" else ("answer", "decline")


def decision_text(question: Question) -> str:
    """Who decided ``question``, how and through what, in a sentence (``"Nobody has decided it yet."`` when open)."""
    verdict = question.verdict
    if verdict is None:
        return "Nobody has decided it yet."
    who = verdict.by.label if verdict.by is not None else "Someone"
    what = {
        "accept": "approved it" if question.kind == "approval" else "answered it",
        "decline": "declined it",
        "respond": "gave the call's result in place of its tool",
        "cancel": "cancelled it",
    }[verdict.decision]
    through = f" through {verdict.channel}" if verdict.channel else ""
    when = verdict.at.strftime("%Y-%m-%d %H:%M UTC")
    note = f' Note: "{verdict.note}"' if verdict.note else ""
    return f"{who} {what}{through} at {when}.{_approvers(question)}{note}"


def _approvers(question: Question) -> str:
    """The people whose approvals made the decision, when it took more than one (``""`` otherwise)."""
    if question.decision != "accept" or len(question.votes) < 2:
        return ""
    names = [vote.principal.label for vote in question.votes]
    return f" Approved by {', '.join(names[:-1])} and {names[-1]}."


def compose(delivery: Delivery, sender: str, base_url: str, links: LinkSigner) -> EmailMessage:
    """The message for ``delivery`` from ``sender`` to its ``address``; links point under ``base_url``."""
    if not delivery.address:
        raise ValueError(f"Delivery {delivery.id} has no email address to send to")
    body = _body(delivery, base_url.rstrip("/"), links)
    message = EmailMessage()
    message["Subject"] = body.subject
    message["From"] = sender
    message["To"] = delivery.address
    message["Date"] = formatdate(delivery.noticed_at.timestamp(), usegmt=True)
    domain = sender.rpartition("@")[2].strip("> ") or "tarry.invalid"
    message["Message-ID"] = f"<tarry-delivery.{UNSAFE_ID.sub('_', delivery.id)}@{domain}>"
    message["References"] = f"<tarry-question.{UNSAFE_ID.sub('_', delivery.question.id)}@{domain}>"
    message[DELIVERY_HEADER] = delivery.id
    message["X-Tarry-Question"] = delivery.question.id
    message["X-Tarry-Event"] = delivery.event
    message.set_content(body.text)
    message.add_alternative(body.html, subtype="html")
    return message


def _body(delivery: Delivery, base_url: str, links: LinkSigner) -> Body:
    question = delivery.question
    shown = _shown(question)
    if delivery.event in PREFIXES and question.verdict is None:
        if delivery.recipient is None:
            raise ValueError(f"Delivery {delivery.id} names no recipient for its links")
        urls = [
            (LINK_TITLES[action], f"{base_url}/links/{links.sign(question.id, delivery.recipient, action)}")
            for action in link_actions(question)
        ]
        text = "\n".join([*shown, "", *(f"{title}: {url}" for title, url in urls), "", LINK_NOTE])
        items = "".join(f'<li><a href="{escape(url)}">{escape(title)}</a></li>' for title, url in urls)
        html = _html(shown, f"<ul>{items}</ul><p>{escape(LINK_NOTE)}</p>")
        return Body(PREFIXES[delivery.event] + _title(question), text, html)
    ending = ENDINGS.get(delivery.event, "Decided")
    outcome = "It expired before anyone decided it." if delivery.event == "expired" else decision_text(question)
    text = "\n".join([*shown, "", outcome])
    return Body(f"{ending}: {_title(question)}", text, _html(shown, f"<p>{escape(outcome)}</p>"))


LINK_NOTE = "Each link opens a page that asks you to confirm; nothing is decided until you do."


def _title(question: Question) -> str:
    call = question.tool_call
    if question.kind == "approval" and call is not None:
        return f"Approve {call.name}?"
    return question.message if len(question.message) <= 80 else question.message[:79] + "…"


def _shown(question: Question) -> list[str]:
    """The question's lines: its message, and the call it is about with its arguments."""
    lines = [question.message]
    call = question.tool_call
    if call is not None:
        arguments = question.proposal if question.proposal is not None else dict(call.arguments)
        lines += ["", f"Call: {call.name}", json.dumps(arguments, indent=2, ensure_ascii=False, default=str)]
    if question.kind == "url" and question.url:
        lines += ["", f"It asks you to open: {question.url}"]
    return lines


def _html(lines: list[str], tail: str) -> str:
    paragraphs = "".join(
        f"<pre>{escape(line)}</pre>" if line.startswith("{") else f"<p>{escape(line)}</p>" for line in lines if line
    )
    return f"<!doctype html><html><body>{paragraphs}{tail}</body></html>"
