"""Email and Slack together behind one notifier, on SQLite and PostgreSQL: the seam of issue 37's parts.

A real [`Notifier`][tarry.jobs.notifier.Notifier] sends through an ``EmailSender`` (to an aiosmtpd process) and a
``SlackSender`` (to the fake Slack Web API), to the people the application's routes name. A two-person approval is
asked; Ada confirms from her email's link, Bob clicks Approve in Slack; the decision is recorded once, with both
votes on the trail, and its notice reaches both channels. The policy's reminder and escalation reach them too.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest
import uvicorn
from slack_sdk.web.async_client import AsyncWebClient
from starlette.applications import Starlette
from starlette.routing import Mount

from tarry import Approval, Principal, Question, Tool
from tarry.jobs.notifier import Notifier
from tarry.mail import EmailSender, LinkSigner
from tarry.store import Store
from tarry.testing import ScriptedModel, advance_clock
from tarry.web import create_app
from tarry.web.slack import SlackSender, create_slack_app
from tests.mail.mailbox import Mailbox, bodies, links
from tests.slack.fake_slack import BOT_TOKEN, FakeSlack
from tests.slack.signing import SIGNING_SECRET, click, signed
from tests.slack.waiting import until
from tests.store.conftest import _postgres_schema_url

LINK_SECRET = "a-link-secret-for-the-seam-tests"
ADA = Principal("ada@example.com", "Ada Lovelace")
BOB = Principal("bob@example.com", "Bob Babbage")
CAROL = Principal("carol@example.com", "Carol Chief")
SLACK_USERS = {("U0ADA", "T0TEAM"): ADA, ("U0BOB", "T0TEAM"): BOB, ("U0CAROL", "T0TEAM"): CAROL}
FORM_TOKEN = re.compile(r'name="link_csrf" value="([^"]+)"')
REMIND, ESCALATE = 600, 1200


class Payout(Tool):
    """Pays a supplier once two people approved; reminds after ten minutes, escalates to Carol after twenty."""

    requires_approval = Approval(count=2, remind_after=REMIND, escalate_after=ESCALATE, escalate_to=(CAROL.id,))

    def execute(self, supplier: str, amount: int) -> str:
        return f"Paid {amount} to {supplier}."


class Launch(Tool):
    """Launches once two people approve within a minute."""

    requires_approval = Approval(count=2)
    approval_ttl = 60.0

    def execute(self, rocket: str) -> str:
        return f"Launched {rocket}."


class People:
    """The application's routes: Ada reads email, Bob and Carol use Slack; Carol hears once it is escalated."""

    def recipients(self, question: Question) -> Iterable[Principal]:
        yield from (ADA, BOB)
        if question.escalated_at is not None:
            yield CAROL

    def address(self, principal: Principal, channel: str) -> str | None:
        where = {
            (ADA.id, "email"): "ada@example.com",
            (BOB.id, "slack"): "U0BOB",
            (CAROL.id, "slack"): "U0CAROL",
        }
        return where.get((principal.id, channel))


class Everywhere(People):
    """Ada reads email and uses Slack too."""

    def address(self, principal: Principal, channel: str) -> str | None:
        return "U0ADA" if (principal.id, channel) == (ADA.id, "slack") else super().address(principal, channel)


def may_decide(principal: Principal, question: Question) -> bool:
    """Ada and Bob may approve; Carol only once the question is escalated to her (the store adds that)."""
    return principal.id in (ADA.id, BOB.id)


def principal_for(slack_user_id: str, team_id: str | None) -> Principal | None:
    return SLACK_USERS.get((slack_user_id, team_id or ""))


@dataclass
class Channels:
    """Everything behind the seam: the store, the notifier, the mailbox, the fake Slack, and the served apps."""

    store: Store
    notifier: Notifier
    mailbox: Mailbox
    slack: FakeSlack
    http: httpx.AsyncClient
    base: str

    async def deliver(self, sent: int) -> None:
        """Run notifier rounds until it has sent ``sent`` deliveries in all (fails after 30 s)."""
        deadline = time.monotonic() + 30
        while self.notifier.sent < sent:
            assert time.monotonic() < deadline, f"the notifier sent {self.notifier.sent} deliveries, not {sent}"
            await self.notifier.deliver()
        assert self.notifier.failed_attempts == 0

    async def mails(self, count: int) -> list[EmailMessage]:
        return await asyncio.to_thread(self.mailbox.messages, count)

    async def asked(self, name: str = "payout", **arguments: object) -> Question:
        arguments = arguments or {"supplier": "Acme", "amount": 900}
        chat = await self.store.create_chat(
            ScriptedModel([[{"name": name, "arguments": arguments}], "Done."]), [Payout(), Launch()]
        )
        await chat.ask("Pay Acme.")
        [question] = await self.store.pending_questions(chat.id)
        return question


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database: a SQLite file, then a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tarry.db'}"
    else:
        yield from _postgres_schema_url()


@pytest.fixture
async def channels(database_url: str, tmp_path: Path) -> AsyncIterator[Channels]:
    """The store, the inbox (with signed links) and tarry's Slack endpoint in one app served by uvicorn on a free
    port, the SMTP server process, the fake Slack API, and a notifier with both senders and the routes."""
    mailbox = Mailbox(tmp_path / "mail")
    try:
        with FakeSlack() as slack:
            async with Store(database_url, may_decide=may_decide) as store:
                await store.setup()
                listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listening.bind(("127.0.0.1", 0))
                base = f"http://127.0.0.1:{listening.getsockname()[1]}"
                signer = LinkSigner(LINK_SECRET)
                email = EmailSender("127.0.0.1", mailbox.port, sender="tarry@example.com", base_url=base, links=signer)
                slack_sender = SlackSender(store, AsyncWebClient(token=BOT_TOKEN, base_url=slack.base_url))
                endpoint = create_slack_app(
                    store, slack_sender, signing_secret=SIGNING_SECRET, principal_for=principal_for
                )
                inbox = create_app(store, token="seam-token-0123456789", link_secret=LINK_SECRET)
                app = Starlette(routes=[Mount("/slack", app=endpoint), Mount("/", app=inbox)])
                server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
                serving = asyncio.create_task(server.serve(sockets=[listening]))
                await until(lambda: server.started, "the apps to be served")
                notifier = Notifier(store, [email, slack_sender], People(), backoff=0.05, expiry_interval=0.0)
                async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                    yield Channels(store, notifier, mailbox, slack, http, base)
                server.should_exit = True
                await serving
    finally:
        mailbox.close()


async def confirm(http: httpx.AsyncClient, url: str) -> httpx.Response:
    """Open an email's link (GET decides nothing) and submit its page's form, as a person's browser does."""
    page = await http.get(url)
    assert page.status_code == 200, page.text
    [token] = FORM_TOKEN.findall(page.text)
    return await http.post(url, data={"link_csrf": token})


async def test_ada_approves_by_email_and_bob_in_slack_and_both_hear_of_the_decision(channels: Channels) -> None:
    store, slack = channels.store, channels.slack
    question = await channels.asked()

    await channels.deliver(2)
    [mail] = await channels.mails(1)
    assert (mail["To"], mail["Subject"], mail["X-Tarry-Event"]) == ("ada@example.com", "Approve payout?", "asked")
    [posted] = slack.of("chat.postMessage")
    assert posted["channel"] == "U0BOB" and "tarry_approve" in str(posted["blocks"])
    [message] = await store.slack_messages(question.id)

    counted = await confirm(channels.http, links(mail)["Approve"])
    assert counted.status_code == 200 and "Your approval was counted" in counted.text
    assert [vote.principal for vote in (await store.question(question.id)).votes] == [ADA]
    await channels.deliver(3)  # the notice of her vote counted: Bob's message shows it (no mail: Ada knows)
    [shown] = slack.of("chat.update")
    assert (shown["channel"], shown["ts"]) == (message.channel, message.ts)
    assert "1 of 2 approvals: Ada Lovelace (email)" in str(shown["blocks"]) and "tarry_approve" in str(shown["blocks"])

    clicked = await channels.http.post(
        "/slack/interactions",
        **signed(click("tarry_approve", question.id, user="U0BOB", channel=message.channel, ts=message.ts)),
    )
    assert clicked.status_code == 200

    decided = await store.question(question.id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", BOB, "slack")
    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.by, event.channel) for event in trail] == [
        ("counted", ADA, "email"),
        ("decided", BOB, "slack"),
    ]

    await channels.deliver(5)  # the notice of the decision: one mail to Ada, one update of Bob's message
    [_, told] = await channels.mails(2)
    assert (told["To"], told["Subject"], told["X-Tarry-Event"]) == (
        "ada@example.com",
        "Decided: Approve payout?",
        "decided",
    )
    assert "Bob Babbage approved it through slack" in bodies(told)[0] and links(told) == {}
    assert "Approved by Ada Lovelace and Bob Babbage." in bodies(told)[0]  # the four eyes, not only the last pair
    await until(lambda: any("Approved* by Bob" in str(body["blocks"]) for body in slack.of("chat.update")), "update")
    update = slack.of("chat.update")[-1]
    assert (update["channel"], update["ts"]) == (message.channel, message.ts)
    assert not [block for block in update["blocks"] if block["type"] == "actions"]
    assert "2 of 2 approvals: Ada Lovelace (email), Bob Babbage (slack)" in str(update["blocks"])

    deliveries = await store.deliveries(question_id=question.id)
    assert sorted((record.event, record.channel, record.address, record.state) for record in deliveries) == [
        ("asked", "email", "ada@example.com", "sent"),
        ("asked", "slack", "U0BOB", "sent"),
        ("counted", "slack", "U0BOB", "sent"),
        ("decided", "email", "ada@example.com", "sent"),
        ("decided", "slack", "U0BOB", "sent"),
    ]
    assert len(slack.of("chat.postMessage")) == 1 and channels.mailbox.received() == 2


async def test_the_reminder_and_the_escalation_reach_both_channels(channels: Channels) -> None:
    store, slack = channels.store, channels.slack
    question = await channels.asked()
    await channels.deliver(2)

    advance_clock(REMIND + 1)
    assert [item.what for item in await store.sweep_reminders()] == ["remind"]
    await channels.deliver(4)
    [_, reminder] = await channels.mails(2)
    assert (reminder["Subject"], reminder["X-Tarry-Event"]) == ("Reminder: Approve payout?", "reminded")
    assert sorted(links(reminder)) == ["Approve", "Decline"]
    assert [body["channel"] for body in slack.of("chat.postMessage")] == ["U0BOB", "U0BOB"]

    advance_clock(ESCALATE - REMIND)
    assert [item.what for item in await store.sweep_reminders()] == ["escalate"]
    await channels.deliver(7)  # Ada's mail, Bob's message, and Carol's: the routes add her once escalated
    [*_, escalation] = await channels.mails(3)
    assert (escalation["Subject"], escalation["X-Tarry-Event"]) == ("Escalated: Approve payout?", "escalated")
    assert sorted(body["channel"] for body in slack.of("chat.postMessage")) == ["U0BOB", "U0BOB", "U0BOB", "U0CAROL"]
    [carols] = [message for message in await store.slack_messages(question.id) if message.channel == "U0CAROL"]
    clicked = await channels.http.post(
        "/slack/interactions",
        **signed(click("tarry_approve", question.id, user="U0CAROL", channel=carols.channel, ts=carols.ts)),
    )
    assert clicked.status_code == 200
    counted = await confirm(channels.http, links(escalation)["Approve"])  # Ada, from the escalation's mail
    assert counted.status_code == 200 and "Approved." in counted.text
    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.by, event.channel) for event in trail] == [
        ("reminded", None, "policy"),
        ("escalated", None, "policy"),
        ("counted", CAROL, "slack"),
        ("decided", ADA, "email"),
    ]

    events = sorted(
        (record.event, record.channel, record.address) for record in await store.deliveries(question_id=question.id)
    )
    assert events == [
        ("asked", "email", "ada@example.com"),
        ("asked", "slack", "U0BOB"),
        ("escalated", "email", "ada@example.com"),
        ("escalated", "slack", "U0BOB"),
        ("escalated", "slack", "U0CAROL"),
        ("reminded", "email", "ada@example.com"),
        ("reminded", "slack", "U0BOB"),
    ]

    await channels.deliver(10)  # the decision: Ada's mail, and Bob's and Carol's Slack deliveries
    [*_, told] = await channels.mails(4)
    assert "Ada Lovelace approved it through email" in bodies(told)[0]
    settled = {(body["channel"], body["ts"]) for body in slack.of("chat.update") if "Approved* by Ada" in str(body)}
    assert settled == {(message.channel, message.ts) for message in await store.slack_messages(question.id)}
    assert len(settled) == 4  # every message posted about it: the asking, the reminder, the escalation, Carol's


async def test_an_approval_that_lapses_is_told_through_both_channels(channels: Channels) -> None:
    store, slack = channels.store, channels.slack
    question = await channels.asked("launch", rocket="Ariane")
    await channels.deliver(2)
    [mail] = await channels.mails(1)
    counted = await confirm(channels.http, links(mail)["Approve"])
    assert counted.status_code == 200 and "Your approval was counted" in counted.text
    await channels.deliver(3)  # her vote counted: Bob's Slack message shows it

    advance_clock(61)
    await channels.deliver(5)  # the notifier writes the notice of the expiry, and sends it
    [_, lapsed] = await channels.mails(2)
    assert (lapsed["Subject"], lapsed["X-Tarry-Event"]) == ("Expired: Approve launch?", "expired")
    assert "It expired before anyone decided it." in bodies(lapsed)[0] and links(lapsed) == {}
    [message] = await store.slack_messages(question.id)
    [shown, update] = slack.of("chat.update")
    assert "1 of 2 approvals: Ada Lovelace (email)" in str(shown["blocks"])
    assert (update["channel"], update["ts"]) == (message.channel, message.ts)
    assert not [block for block in update["blocks"] if block["type"] == "actions"]

    late = await channels.http.get(links(mail)["Approve"])
    assert late.status_code == 410 and 'data-refused="lapsed"' in late.text


async def test_one_person_on_both_channels_counts_once(channels: Channels) -> None:
    store, slack = channels.store, channels.slack
    channels.notifier.routes = Everywhere()
    question = await channels.asked()
    await channels.deliver(3)  # Ada's mail, Ada's Slack message, Bob's Slack message
    [mail] = await channels.mails(1)
    assert sorted(body["channel"] for body in slack.of("chat.postMessage")) == ["U0ADA", "U0BOB"]
    counted = await confirm(channels.http, links(mail)["Approve"])
    assert counted.status_code == 200 and "Your approval was counted" in counted.text

    [adas] = [message for message in await store.slack_messages(question.id) if message.channel == "D0ADA"]
    again = await channels.http.post(
        "/slack/interactions",
        **signed(click("tarry_approve", question.id, user="U0ADA", channel=adas.channel, ts=adas.ts)),
    )
    assert again.status_code == 200
    await until(lambda: bool(slack.of("chat.postEphemeral")), "Ada to be told")
    [told] = [body["text"] for body in slack.of("chat.postEphemeral")]
    assert "Ada Lovelace already approved the payout call; it needs 2 different people" in told
    still = await store.question(question.id)
    assert still.decision is None and [vote.principal for vote in still.votes] == [ADA]
    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.by, event.channel) for event in trail] == [
        ("counted", ADA, "email"),
        ("refused", ADA, "slack"),
    ]
