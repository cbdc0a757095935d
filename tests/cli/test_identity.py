"""Who decides from a shell: the OS user is one verified identity, ``--as`` a claim nobody checked.

Real ``tarry`` processes on a SQLite file and on PostgreSQL, against a two-person rule.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from tarry import Tool
from tarry.approvals import Approval
from tarry.cli.exits import Exit
from tarry.cli.identity import os_user
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.cli.conftest import tarry, tarry_command, user_environment
from tests.store.approvers import Payout

ROOT = Path(__file__).resolve().parents[2]


class Deploy(Tool):
    """Deploys a service to production; two different people approve it."""

    requires_approval = Approval(count=2)

    def execute(self, service: str) -> str:
        return f"{service} deployed"


async def parked_on(store: Store, tool: Tool, arguments: dict[str, object]) -> str:
    chat = await store.create_chat(ScriptedModel([[{"name": tool.name, "arguments": arguments}], "Done."]), [tool])
    await chat.ask("Go")
    [question] = await chat.pending_questions()
    return question.id


def tarry_as(user: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``tarry ARGUMENTS`` in a shell whose ``$USER`` and ``$LOGNAME`` claim to be ``user``."""
    return subprocess.run(
        [tarry_command(), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=user_environment(USER=user, LOGNAME=user),
        check=False,
    )


async def test_one_shell_user_cannot_complete_a_two_person_rule_with_two_names(store: Store, database_url: str) -> None:
    question_id = await parked_on(store, Deploy(), {"service": "api"})
    for name in ("mallory", "mallory-2"):
        claimed = await asyncio.to_thread(tarry, "approve", question_id, "--as", name, "--url", database_url)
        assert claimed.returncode == Exit.NOT_ALLOWED, claimed.stdout
        assert f"{name} is a self-declared name that nobody checked" in claimed.stderr
    first = await asyncio.to_thread(tarry, "approve", question_id, "--url", database_url)
    assert first.returncode == Exit.OK, first.stderr
    assert "approval 1 of 2" in first.stdout
    # The environment names whoever the caller likes; the OS account behind the process is the same one.
    spoofed = await asyncio.to_thread(tarry_as, "someone-else", "approve", question_id, "--url", database_url)
    assert spoofed.returncode == Exit.NOT_ALLOWED, spoofed.stdout
    assert f"{os_user().id} already approved the deploy call" in spoofed.stderr
    question = await store.question(question_id)
    assert question.decision is None and [vote.principal.id for vote in question.votes] == [os_user().id]
    trail = [
        (event.outcome, event.by.id if event.by else None) for event in await store.history(question_id=question_id)
    ]
    assert trail == [
        ("refused", "mallory"),
        ("refused", "mallory-2"),
        ("counted", os_user().id),
        ("refused", os_user().id),
    ]


async def test_pending_shows_the_policy_the_votes_and_who_may_decide(store: Store, database_url: str) -> None:
    question_id = await parked_on(store, Payout(), {"to": "Carol", "amount": 9})
    check = ["--may-decide", "tests.cli.policies:finance_or_this_shell", "--url", database_url]
    me = os_user().id
    before = await asyncio.to_thread(tarry, "pending", *check, cwd=ROOT)
    assert before.returncode == Exit.OK, before.stderr
    assert "Needs 2 different people's approval, each allowed as 'finance'; 0 of 2 so far." in before.stdout
    assert f"You ({me}) may approve it: tarry approve {question_id}" in before.stdout
    stranger = await asyncio.to_thread(tarry, "pending", "--as", "mallory", *check, cwd=ROOT)
    assert "Not yours to decide: mallory is a self-declared name that nobody checked" in stranger.stdout
    assert "tarry approve" not in stranger.stdout
    approved = await asyncio.to_thread(tarry, "approve", question_id, *check, cwd=ROOT)
    assert approved.returncode == Exit.OK, approved.stderr
    after = await asyncio.to_thread(tarry, "pending", *check, cwd=ROOT)
    assert f"1 of 2 so far: {me}." in after.stdout
    assert f"You ({me}) may decline it, not approve it: {me} already approved the payout call" in after.stdout
    assert "tarry approve" not in after.stdout
    unchecked = await asyncio.to_thread(tarry, "pending", "--url", database_url)
    assert "Not yours to decide: Only 'finance' may decide the payout call, and nothing checks who" in unchecked.stdout


async def test_the_policy_check_comes_from_the_environment_and_a_coroutine_is_refused(
    store: Store, database_url: str
) -> None:
    question_id = await parked_on(store, Payout(), {"to": "Carol", "amount": 9})
    configured = await asyncio.to_thread(
        subprocess.run,
        [tarry_command(), "approve", question_id, "--url", database_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=user_environment(TARRY_MAY_DECIDE="tests.cli.policies:finance_or_this_shell"),
        check=False,
    )
    assert configured.returncode == Exit.OK, configured.stderr
    assert "approval 1 of 2" in configured.stdout
    awaited = await asyncio.to_thread(
        tarry, "decline", question_id, "--may-decide", "tests.cli.policies:awaited", "--url", database_url, cwd=ROOT
    )
    assert awaited.returncode == Exit.FAILED
    assert "may_decide must be a plain function returning a bool, not a coroutine function" in awaited.stderr
    assert (await store.question(question_id)).decision is None
