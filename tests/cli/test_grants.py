"""``tarry grants``: list, add and revoke standing grants from a shell, as the OS user, in a process of its own;
the grant it makes approves a call of a chat this test process carries on."""

from __future__ import annotations

import asyncio
import json

from tarry.cli.exits import Exit
from tarry.cli.identity import os_user
from tarry.store import Store
from tests.cli.chat_agent import agent
from tests.cli.conftest import tarry


async def test_a_grant_added_from_the_shell_approves_the_agents_calls_until_revoked(
    store: Store, database_url: str
) -> None:
    added = await asyncio.to_thread(
        tarry, "grants", "add", "transfer_money", "--agent", "cli-test", "--within", "amount=..50",
        "--equal", "to=Bob", "--for", "3600", "--url", database_url,
    )  # fmt: skip
    assert added.returncode == Exit.OK, added.stderr
    assert added.stdout.startswith("Granted: ")
    assert 'transfer_money (to="Bob", amount=..50), agent cli-test, by ' in added.stdout
    listed = await asyncio.to_thread(tarry, "grants", "--json", "--url", database_url)
    (grant,) = json.loads(listed.stdout)
    assert grant["granted_by"]["id"] == os_user().id and grant["expires_at"] is not None
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")  # transfer_money(amount=20, to="Bob")
    assert not chat.waiting and chat.messages[-2].content == "Sent 20 EUR to Bob."
    (event,) = await store.history(chat.id)
    assert (event.channel, event.detail, event.by) == ("grant", f"grant {grant['id']}", os_user())
    revoked = await asyncio.to_thread(tarry, "grants", "revoke", grant["id"], "--url", database_url)
    assert revoked.returncode == Exit.OK, revoked.stderr
    assert "approves nothing from now on" in revoked.stdout
    assert "No standing grants." in (await asyncio.to_thread(tarry, "grants", "--url", database_url)).stdout
    every = await asyncio.to_thread(tarry, "grants", "--all", "--url", database_url)
    assert grant["id"] in every.stdout and "revoked" in every.stdout
    again = await store.create_chat(agent=agent)
    await again.ask("pay Bob")
    assert again.waiting


async def test_bad_grants_exit_with_their_status(store: Store, database_url: str) -> None:
    reversed_bounds = await asyncio.to_thread(
        tarry, "grants", "add", "transfer_money", "--within", "amount=9..1", "--url", database_url
    )
    assert reversed_bounds.returncode == Exit.USAGE and "reversed" in reversed_bounds.stderr
    not_bounds = await asyncio.to_thread(
        tarry, "grants", "add", "transfer_money", "--within", "amount=9", "--url", database_url
    )
    assert not_bounds.returncode == Exit.USAGE and "NAME=MIN..MAX" in not_bounds.stderr
    both = await asyncio.to_thread(
        tarry, "grants", "add", "transfer_money", "--chat", "a", "--agent", "b", "--url", database_url
    )
    assert both.returncode == Exit.USAGE
    unknown = await asyncio.to_thread(tarry, "grants", "revoke", "no-such-grant", "--url", database_url)
    assert unknown.returncode == Exit.UNKNOWN and "No grant has the id 'no-such-grant'" in unknown.stderr
    assert await store.grants(include_ended=True) == []
