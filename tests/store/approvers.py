"""What the accountable-decision tests share with the approver processes they start.

``python -m tests.store.approvers URL IDS_FILE START_FILE WHO [at-once]`` approves every question in
``IDS_FILE`` as ``WHO`` once ``START_FILE`` appears (one after another, or all at once), and prints
what came of each attempt.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tarry import Field, Question, Task, Tool
from tarry.approvals import Approval
from tarry.errors import NotAllowedError
from tarry.principals import Principal
from tarry.store import Store
from tests.store.tools import mark

FINANCE = {"ann": "Ann Archer", "bob": "Bob Baker"}
"""Who is in the finance group."""


def may_decide(principal: Principal, question: Question) -> bool:
    """The application's rule: a policy's ``by`` names a group, and only finance exists."""
    return question.policy is not None and question.policy.by == "finance" and principal.id in FINANCE


class Payout(Tool):
    """Pays money out of the company account."""

    requires_approval = Approval(count=2, by="finance")

    def execute(self, amount: int, to: str) -> str:
        mark("payout", f"{to}:{amount}")
        return f"Paid {amount} to {to}"


class Unlock(Tool):
    """Unlocks the vault with a PIN a person types in."""

    def execute(self, vault: str) -> Task:
        return self.ask("Type the vault's PIN", pin=Field(secret=True), reason=Field(required=False))

    def resume(self, task: Task, vault: str) -> str:
        assert task.answer is not None
        return f"{vault} unlocked ({len(task.answer['pin'])} digits)"


async def approve_all(url: str, ids_file: str, start_file: str, who: str, how: str = "one-by-one") -> None:
    """Approve every question as ``who`` after the start signal, one after another or (``how="at-once"``) all at
    once; print each attempt's outcome."""
    ids = json.loads(Path(ids_file).read_text())
    outcomes: dict[str, str] = {}
    async with Store(url, may_decide=may_decide) as store:
        await store.pending_questions()  # open the pool before the start signal
        while not Path(start_file).exists():
            await asyncio.sleep(0.01)

        async def approve(question_id: str) -> None:
            try:
                outcomes[question_id] = (
                    "recorded" if await store.approve(question_id, by=who, channel="api") else "lost"
                )
            except NotAllowedError:
                outcomes[question_id] = "refused"

        if how == "at-once":
            await asyncio.gather(*(approve(question_id) for question_id in ids))
        else:
            for question_id in ids:
                await approve(question_id)
    print(json.dumps(outcomes))


if __name__ == "__main__":
    asyncio.run(approve_all(*sys.argv[1:]))
