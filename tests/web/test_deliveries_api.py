"""The deliveries of notices through the JSON API, on SQLite and PostgreSQL: listed with their state, attempts and
last error, filtered by state, and a failed one retried; an unknown id is a 404 problem."""

from __future__ import annotations

from tarry.jobs.notifier import Notifier
from tarry.notices import Delivery
from tarry.store import Store
from tests.web.client import AUTH, Inbox, problem
from tests.web.test_grants_api import ask_refund
from tests.web.tools import run


class Down:
    """An endpoint that is down: every attempt fails."""

    channel = "hook"
    endpoint = True

    async def send(self, delivery: Delivery) -> None:
        raise ConnectionError("connection refused")


def fail_once(url: str) -> None:
    """One round of a notifier whose endpoint is down, with one attempt per delivery."""

    async def deliver() -> None:
        async with Store(url) as store:
            assert await Notifier(store, [Down()], max_attempts=1).deliver() == 1

    run(deliver)


def test_a_failed_delivery_is_listed_with_its_error_and_retried(any_inbox: Inbox) -> None:
    client = any_inbox.client
    chat_id, waiting = ask_refund(any_inbox.url, 50)
    assert waiting
    fail_once(any_inbox.url)

    (listed,) = client.get("/api/deliveries", headers=AUTH).json()
    assert (listed["state"], listed["attempts"], listed["event"]) == ("failed", 1, "asked")
    assert (listed["chat_id"], listed["channel"], listed["recipient"]) == (chat_id, "hook", None)
    assert listed["last_error"] == "ConnectionError: connection refused"
    assert client.get("/api/deliveries", params={"state": "sent"}, headers=AUTH).json() == []
    assert len(client.get("/api/deliveries", params={"state": "failed"}, headers=AUTH).json()) == 1

    retried = client.post(f"/api/deliveries/{listed['id']}/retry", headers=AUTH)
    assert retried.status_code == 200, retried.text
    assert (retried.json()["state"], retried.json()["attempts"]) == ("pending", 0)
    assert client.get("/api/deliveries", params={"state": "pending"}, headers=AUTH).json()[0]["id"] == listed["id"]
    unknown = problem(client.post("/api/deliveries/dlv_nope/retry", headers=AUTH), 404)
    assert unknown["detail"] == "No delivery has this id."
    bad_state = client.get("/api/deliveries", params={"state": "lost"}, headers=AUTH)
    assert bad_state.status_code == 400, bad_state.text
