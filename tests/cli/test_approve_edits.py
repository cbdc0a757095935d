"""``tarry approve ID --set NAME=VALUE``: approving a call with changed arguments from a shell, and what
``tarry pending`` shows of them. Real processes, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import asyncio

from tarry.cli.exits import Exit
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.cli.chat_agent import agent, turn
from tests.cli.conftest import tarry


async def test_approve_with_set_changes_the_arguments_and_pending_shows_what_may_change(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")
    [approval] = await chat.pending_questions()
    listed = await asyncio.to_thread(tarry, "pending", "--url", database_url)
    assert "may change: amount, to (approve with --set NAME=VALUE)" in listed.stdout

    wrong = await asyncio.to_thread(
        tarry, "approve", approval.id, "--set", "amount=lots", "--set", "colour=red", "--url", database_url
    )
    assert wrong.returncode == Exit.INVALID, wrong.stderr
    assert "amount: 'lots' is not of type 'integer'" in wrong.stderr
    assert "colour: the transfer_money tool does not let a person change colour" in wrong.stderr
    assert (await store.question(approval.id)).decision is None

    done = await asyncio.to_thread(
        tarry, "approve", approval.id, "--set", "amount=15", "--set", "to=Ann Lee", "--url", database_url
    )
    assert done.returncode == Exit.OK, done.stderr
    assert "Recorded: approved with amount=15 (was 20), to='Ann Lee' (was 'Bob')" in done.stdout
    decided = await store.question(approval.id)
    assert decided.answer == {"arguments": {"amount": 15, "to": "Ann Lee"}}
    loaded = await store.load_chat(chat.id, ScriptedModel([turn]), agent.tools)
    await loaded.complete()
    assert loaded.messages[-2].content.endswith("Sent 15 EUR to Ann Lee.")


def test_set_needs_a_name_and_one_question() -> None:
    bad = tarry("approve", "some-id", "--set", "amount")
    assert bad.returncode == Exit.USAGE and "--set takes NAME=VALUE, got 'amount'" in bad.stderr
    whole = tarry("approve", "--chat", "c1", "--all", "--set", "amount=1")
    assert whole.returncode == Exit.USAGE and "--set changes one call's arguments" in whole.stderr
