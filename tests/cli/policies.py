"""A deployment's ``may_decide`` as the CLI tests name it (``--may-decide tests.cli.policies:NAME``)."""

from __future__ import annotations

from tarry.cli.identity import os_user
from tarry.principals import Principal
from tarry.questions import Question
from tests.store.approvers import may_decide


def finance_or_this_shell(principal: Principal, question: Question) -> bool:
    """Finance's members, and the OS user running the tests (so one real account can approve)."""
    return may_decide(principal, question) or principal.id == os_user().id


async def awaited(principal: Principal, question: Question) -> bool:
    """A coroutine function: refused as a check, since nothing could await it."""
    return True
