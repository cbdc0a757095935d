"""Webhooks to a receiver in another process that verifies every signature: delivered, retried with backoff, kept
as failed, retried by hand, and delivered at least once each by a worker SIGKILLed mid-delivery, again and again."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tarry.clock import advance, utcnow
from tarry.errors import UnknownDeliveryError
from tarry.jobs.notifier import Notifier
from tarry.jobs.webhook import WebhookSender
from tarry.store import Store
from tests.notify.conftest import NEWER_SECRET, ROOT, SECRET, Receiver, environment, start_receiver
from tests.store.test_approve_all import transfer, turn_of


async def test_a_question_asked_and_approved_reaches_the_receiver_signed_with_the_question(
    store: Store, receiver: Receiver
) -> None:
    _, (question,) = await turn_of(store, [transfer("Bob")])
    notifier = Notifier(store, [WebhookSender(receiver.url, SECRET)])
    assert await notifier.deliver() == 1
    assert await store.approve(question.id, by="ann")
    assert await notifier.deliver() == 1

    asked, decided = receiver.wait_for(2)

    assert (asked["type"], decided["type"]) == ("question.asked", "question.decided")
    assert asked["question"] == decided["question"] == question.id
    assert asked["verified"] and decided["verified"]
    listed = {delivery.event: delivery for delivery in await store.deliveries()}
    assert (listed["asked"].id, listed["decided"].id) == (asked["id"], decided["id"])
    assert all(delivery.state == "sent" and delivery.attempts == 1 for delivery in listed.values())


async def test_a_sender_with_two_secrets_signs_with_both_while_they_rotate(store: Store, tmp_path: Path) -> None:
    both = start_receiver(tmp_path / "both", NEWER_SECRET, SECRET)  # verifies with each: both signatures needed
    try:
        await turn_of(store, [transfer("Bob")])
        notifier = Notifier(store, [WebhookSender(both.url, [NEWER_SECRET, SECRET])])
        assert await notifier.deliver() == 1
        (got,) = both.wait_for(1)
        assert got["verified"]
    finally:
        both.process.kill()
        both.process.wait()


async def test_a_receiver_that_fails_is_tried_again_after_a_doubling_backoff_then_kept_as_failed(
    store: Store, receiver: Receiver
) -> None:
    receiver.answer(500)
    _, (question,) = await turn_of(store, [transfer("Bob")])
    notifier = Notifier(store, [WebhookSender(receiver.url, SECRET)], max_attempts=3, backoff=10, max_backoff=15)

    assert await notifier.deliver() == 1
    (delivery,) = await store.deliveries()
    assert (delivery.state, delivery.attempts) == ("pending", 1)
    assert delivery.last_error is not None and "answered 500" in delivery.last_error
    assert 9 <= (delivery.next_attempt_at - utcnow()).total_seconds() <= 10
    assert await notifier.deliver() == 0, "not due before its backoff"

    advance(10)
    assert await notifier.deliver() == 1
    (delivery,) = await store.deliveries()
    assert delivery.attempts == 2
    assert 14 <= (delivery.next_attempt_at - utcnow()).total_seconds() <= 15, "doubled to 20 s, capped at 15 s"

    advance(15)
    assert await notifier.deliver() == 1
    (failed,) = await store.deliveries(state="failed")
    assert (failed.id, failed.attempts) == (delivery.id, 3)
    assert failed.last_error is not None and "answered 500" in failed.last_error
    advance(3600)
    assert await notifier.deliver() == 0, "a failed delivery is kept, and not tried again by itself"
    assert [got["id"] for got in receiver.received()] == [delivery.id] * 3, "every attempt under one id"

    receiver.answer(204)
    retried = await store.retry_delivery(delivery.id)
    assert (retried.state, retried.attempts) == ("pending", 0)
    assert await notifier.deliver() == 1
    (sent,) = await store.deliveries()
    assert (sent.state, sent.attempts, sent.last_error) == ("sent", 1, None)
    assert len(receiver.received()) == 4
    with pytest.raises(UnknownDeliveryError, match="No delivery has the id 'dlv_nope'"):
        await store.retry_delivery("dlv_nope")
    assert question.id == sent.question_id


def start_deliverer(url: str, receiver: Receiver, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.notify.deliverer", url, receiver.url, SECRET, "1"]
    with log.open("ab") as output:
        return subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=output, stderr=output)


async def test_a_worker_killed_mid_delivery_again_and_again_loses_no_notice(
    database_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    async with Store(database_url) as store:
        await store.setup()
        asked = []
        for _ in range(2):
            _, waiting = await turn_of(store, [transfer(name) for name in ("Bob", "Dan", "Eve", "Fay", "Gus")])
            asked += waiting
        expected = {(question.id, "question.asked") for question in asked}
        receiver.answer(204, delay=0.05)  # each webhook takes a while: the kills land while some are under way
        kills = 0
        deadline = time.monotonic() + 180

        async def all_sent() -> bool:
            return len(await store.deliveries(state="sent", limit=1000)) == len(expected)

        while not await all_sent():
            assert time.monotonic() < deadline, "the deliveries did not all go within 180 s"
            before = len(receiver.received())
            worker = start_deliverer(database_url, receiver, tmp_path / "deliverer.log")
            # Killed once two more webhooks arrived: others are on their way, their claims held.
            while len(receiver.received()) < before + 2 and worker.poll() is None and time.monotonic() < deadline:
                if await all_sent():
                    break
                await asyncio.sleep(0.02)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            kills += 1
        got = receiver.received()

    assert kills >= 2
    assert all(line["verified"] for line in got)
    assert {(line["question"], line["type"]) for line in got} == expected, "every notice arrived, none lost"
    by_id: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for line in got:
        by_id[line["id"]].add((line["question"], line["type"]))
    assert all(len(notices) == 1 for notices in by_id.values()), "a repeat has its first attempt's id"
    assert len(by_id) == len(expected)


async def test_two_workers_at_once_send_each_delivery_once(
    database_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    async with Store(database_url) as store:
        await store.setup()
        asked = []
        for _ in range(4):
            _, waiting = await turn_of(store, [transfer(name) for name in ("Bob", "Dan", "Eve", "Fay", "Gus")])
            asked += waiting
        command = [sys.executable, "-m", "tests.notify.deliverer", database_url, receiver.url, SECRET, "60"]
        workers = [start_process(command, tmp_path / f"deliverer-{number}.log") for number in range(2)]
        try:
            got = await asyncio.to_thread(receiver.wait_for, len(asked), 120)
            await asyncio.sleep(0.5)  # a second sending of any of them would arrive meanwhile
            got = receiver.received()
        finally:
            for worker in workers:
                worker.kill()
                worker.wait()
        sent = await store.deliveries(state="sent", limit=1000)

    assert sorted(line["question"] for line in got) == sorted(question.id for question in asked), "each once"
    assert len({line["id"] for line in got}) == len(asked) == len(sent)
    assert all(delivery.attempts == 1 for delivery in sent)


def start_process(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=output, stderr=output)
