"""``tarry deliveries``: the deliveries of notices listed from a shell, with their state, attempts and last error,
and a failed one made due again, in a process of its own."""

from __future__ import annotations

import asyncio
import json

from tarry.cli.exits import Exit
from tarry.jobs.notifier import Notifier
from tarry.notices import Delivery
from tarry.store import Store
from tests.cli.chat_agent import agent
from tests.cli.conftest import tarry


class Down:
    """An endpoint that is down: every attempt fails."""

    channel = "hook"
    endpoint = True

    async def send(self, delivery: Delivery) -> None:
        raise ConnectionError("connection refused")


async def test_a_failed_delivery_is_listed_with_its_error_and_retried_from_the_shell(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")
    (question,) = await chat.pending_questions()
    assert await Notifier(store, [Down()], max_attempts=1).deliver() == 1

    failed = await asyncio.to_thread(tarry, "deliveries", "--state", "failed", "--url", database_url)
    assert failed.returncode == Exit.OK, failed.stderr
    assert f"failed (1 attempt)  asked {question.id} via hook: ConnectionError: connection refused" in failed.stdout
    listed = await asyncio.to_thread(tarry, "deliveries", "--json", "--url", database_url)
    (delivery,) = json.loads(listed.stdout)
    assert (delivery["state"], delivery["attempts"], delivery["event"]) == ("failed", 1, "asked")
    sent = await asyncio.to_thread(tarry, "deliveries", "--state", "sent", "--url", database_url)
    assert sent.stdout.strip() == "No deliveries."

    retried = await asyncio.to_thread(tarry, "deliveries", "--retry", delivery["id"], "--url", database_url)
    assert retried.returncode == Exit.OK, retried.stderr
    assert retried.stdout.startswith(f"Due now: {delivery['id']}  pending (0 attempts)")
    (now,) = await store.deliveries()
    assert (now.state, now.attempts) == ("pending", 0)
    unknown = await asyncio.to_thread(tarry, "deliveries", "--retry", "dlv_nope", "--url", database_url)
    assert unknown.returncode == Exit.UNKNOWN and "No delivery has the id 'dlv_nope'" in unknown.stderr
