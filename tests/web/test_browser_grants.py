"""The inbox's standing grants page in Debian's Chromium against a live uvicorn server: a grant is listed, and
its Revoke button ends it."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tarry.grants import Grant
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import TOOLS, call, run


def grant_refunds(url: str) -> Grant:
    async def made() -> Grant:
        async with Store(url) as store:
            return await store.grant("refund", by=Principal("ada", "Ada Lovelace"), equal={"order": "A1"}, ttl=3600)

    return run(made)


def grants(url: str, include_ended: bool = False) -> list[Grant]:
    async def listed() -> list[Grant]:
        async with Store(url) as store:
            return await store.grants(include_ended=include_ended)

    return run(listed)


def refund_waits(url: str) -> bool:
    """Whether a new stored chat's call to refund order A1 waits for a person (else a grant approved it)."""

    async def asked() -> bool:
        async with Store(url) as store:
            chat = await store.create_chat(ScriptedModel([[call("refund", order="A1", amount=5)], "Done."]), TOOLS)
            await chat.ask("Refund it")
            return chat.waiting

    return run(asked)


def test_a_grant_is_listed_and_revoked_from_the_inbox(page: Any, live: LiveServer) -> None:
    grant = grant_refunds(live.url)
    assert not refund_waits(live.url), "the grant approves a matching call at once"
    page.get_by_role("link", name="Standing grants").click()
    listed = page.locator(f'[data-grant="{grant.id}"]')
    expect(listed).to_contain_text("refund")
    expect(listed).to_contain_text("everywhere")
    expect(listed).to_contain_text("Ada Lovelace")
    expect(listed).to_contain_text('order = "A1"')
    expect(listed).to_contain_text("ends in")
    screenshot(page, "grants")

    listed.get_by_role("button", name="Revoke").click()

    expect(page.locator('[data-outcome="revoked"]')).to_contain_text("Revoked")
    expect(page.locator("[data-grant]")).to_have_count(0)
    assert grants(live.url) == []
    [ended] = grants(live.url, include_ended=True)
    assert ended.revoked_at is not None and ended.revoked_by is not None
    assert ended.revoked_by.id == "inbox-token"  # who signed in: the shared token's holder
    assert refund_waits(live.url), "a revoked grant approves nothing"
