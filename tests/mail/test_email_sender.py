"""EmailSender against a real SMTP server in its own process: the message, its headers, its links."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import aiosmtplib
import pytest

from tarry import Principal, Question, Verdict
from tarry.mail import DELIVERY_HEADER, EmailSender, LinkSigner
from tarry.notices import Delivery, NoticeEvent
from tarry.store import Store
from tests.mail.mailbox import Mailbox, bodies, links
from tests.web.tools import call, park_async

SECRET = "a-link-secret-for-the-mail-tests"
ADA = Principal("u-ada", "Ada Lovelace")
BASE = "https://inbox.example.com/tarry"


def sender(mailbox: Mailbox) -> EmailSender:
    return EmailSender("127.0.0.1", mailbox.port, sender="tarry@example.com", base_url=BASE, links=LinkSigner(SECRET))


def delivery(question: Question, event: NoticeEvent = "asked", id: str = "d-1") -> Delivery:
    return Delivery(
        id=id,
        event=event,
        channel="email",
        question=question,
        recipient=ADA,
        address="ada@example.com",
        attempt=1,
        noticed_at=datetime(2026, 12, 4, 20, 0, tzinfo=UTC),
    )


async def asked(url: str, *calls: dict[str, object]) -> Question:
    chat_id = await park_async(url, calls)
    async with Store(url) as store:
        [question] = await store.pending_questions(chat_id)
    return question


async def test_an_asked_approval_is_a_multipart_mail_with_approve_and_decline_links(
    mailbox: Mailbox, database_url: str
) -> None:
    question = await asked(database_url, call("refund", order="A17", amount=30, reason="broken"))
    await sender(mailbox).send(delivery(question, id="delivery-7"))

    [message] = mailbox.messages(1)
    assert message["To"] == "ada@example.com"
    assert message["From"] == "tarry@example.com"
    assert message["Subject"] == "Approve refund?"
    assert message[DELIVERY_HEADER] == "delivery-7"
    assert message["Message-ID"] == "<tarry-delivery.delivery-7@example.com>"
    assert message["X-Tarry-Question"] == question.id
    assert message.get_content_type() == "multipart/alternative"
    text, html = bodies(message)
    assert "Call: refund" in text
    assert '"order": "A17"' in text
    found = links(message)
    assert sorted(found) == ["Approve", "Decline"]
    signer = LinkSigner(SECRET)
    for title, url in found.items():
        assert url.startswith(f"{BASE}/links/")
        assert f'href="{url}"' in html  # the HTML part carries the same links
        link = signer.read(url.rsplit("/", 1)[1])
        assert (link.question_id, link.principal, link.action) == (question.id, ADA, title.lower())


async def test_a_form_question_gets_answer_and_decline_links(mailbox: Mailbox, database_url: str) -> None:
    question = await asked(database_url, call("book_table", restaurant="Luigi's"))
    await sender(mailbox).send(delivery(question, "reminded"))
    [message] = mailbox.messages(1)
    assert message["Subject"] == "Reminder: How should I book Luigi's?"
    assert sorted(links(message)) == ["Answer", "Decline"]


@pytest.mark.parametrize(
    ("event", "verdict", "subject", "says"),
    [
        (
            "decided",
            Verdict("decline", datetime(2026, 12, 4, 20, 5, tzinfo=UTC), note="too much", by=ADA, channel="email"),
            "Decided: Approve refund?",
            'Ada Lovelace declined it through email at 2026-12-04 20:05 UTC. Note: "too much"',
        ),
        (
            "decided",
            Verdict("accept", datetime(2026, 12, 4, 20, 6, tzinfo=UTC), answer={}, by=Principal("bo"), channel="web"),
            "Decided: Approve refund?",
            "bo approved it through web at 2026-12-04 20:06 UTC.",
        ),
        ("expired", None, "Expired: Approve refund?", "It expired before anyone decided it."),
        (
            "cancelled",
            Verdict("cancel", datetime(2026, 12, 4, 20, 7, tzinfo=UTC), channel="code"),
            "Cancelled: Approve refund?",
            "Someone cancelled it through code at 2026-12-04 20:07 UTC.",
        ),
    ],
)
async def test_an_ending_is_a_short_notice_without_links(
    mailbox: Mailbox, database_url: str, event: NoticeEvent, verdict: Verdict | None, subject: str, says: str
) -> None:
    question = await asked(database_url, call("refund", order="A17", amount=30))
    if verdict is not None:
        question = question.decided_with(verdict)
    await sender(mailbox).send(delivery(question, event))
    [message] = mailbox.messages(1)
    text, html = bodies(message)
    assert message["Subject"] == subject
    assert says in text
    assert links(message) == {}
    assert "/links/" not in html


async def test_a_delivery_it_cannot_send_raises_so_the_worker_tries_again(mailbox: Mailbox, database_url: str) -> None:
    question = await asked(database_url, call("refund", order="A17", amount=30))
    with pytest.raises(ValueError, match="sends email deliveries, got channel 'slack'"):
        await sender(mailbox).send(replace(delivery(question), channel="slack"))
    with pytest.raises(ValueError, match="has no email address"):
        await sender(mailbox).send(replace(delivery(question), address=None))
    closed = EmailSender("127.0.0.1", 1, sender="tarry@example.com", base_url=BASE, links=LinkSigner(SECRET), timeout=5)
    with pytest.raises(aiosmtplib.SMTPConnectError):
        await closed.send(delivery(question))
    assert mailbox.received() == 0


def test_a_sender_is_made_with_what_it_needs() -> None:
    signer = LinkSigner(SECRET)
    assert EmailSender("smtp.example.com", sender="t@example.com", base_url=BASE, links=signer).channel == "email"
    with pytest.raises(ValueError, match="sender must be an email address"):
        EmailSender("smtp.example.com", sender="tarry", base_url=BASE, links=signer)
    with pytest.raises(ValueError, match="base_url must be the inbox's http"):
        EmailSender("smtp.example.com", sender="t@example.com", base_url="inbox.example.com", links=signer)


async def test_a_notice_of_asking_that_finds_the_question_decided_offers_no_links(
    mailbox: Mailbox, database_url: str
) -> None:
    question = await asked(database_url, call("refund", order="A17", amount=30))
    verdict = Verdict("accept", datetime(2026, 12, 4, 20, 9, tzinfo=UTC), answer={}, by=ADA, channel="slack")
    await sender(mailbox).send(delivery(question.decided_with(verdict)))
    [message] = mailbox.messages(1)
    assert message["Subject"] == "Decided: Approve refund?"
    assert "Ada Lovelace approved it through slack at 2026-12-04 20:09 UTC." in bodies(message)[0]
    assert links(message) == {}


async def test_it_logs_in_to_a_server_that_asks_for_a_login(database_url: str, tmp_path: Path) -> None:
    server = Mailbox(tmp_path / "guarded", login="tarry:s3cret")
    try:
        question = await asked(database_url, call("refund", order="A17", amount=30))
        signer = LinkSigner(SECRET)
        made = {"sender": "tarry@example.com", "base_url": BASE, "links": signer}
        with pytest.raises(aiosmtplib.SMTPResponseException, match="Authentication required"):
            await EmailSender("127.0.0.1", server.port, **made).send(delivery(question))  # type: ignore[arg-type]
        assert server.received() == 0
        right = EmailSender("127.0.0.1", server.port, username="tarry", password="s3cret", **made)  # type: ignore[arg-type]
        await right.send(delivery(question, id="d-logged-in"))
        [message] = server.messages(1)
        assert message[DELIVERY_HEADER] == "d-logged-in"
    finally:
        server.close()
