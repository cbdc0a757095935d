"""What a Slack user is told, in an ephemeral message, when their click decides nothing."""

from __future__ import annotations

from tarry.clock import utcnow
from tarry.questions import Question
from tarry.web.decisions import Result
from tarry.web.slack.blocks import outcome_line


def why_not_open(question: Question) -> str | None:
    """Why ``question`` can no longer be decided (decided already, or expired), or ``None`` while it is open."""
    if question.verdict is not None:
        return f"This was decided already: {outcome_line(question, 'decided')}."
    if question.expired(utcnow()):
        return f"{outcome_line(question, 'expired')}. Nothing was recorded."
    return None


def refusal(result: Result) -> str | None:
    """What to tell the person whose decision had ``result``, or ``None`` when the updated message says it all."""
    question = result.question
    if result.outcome == "counted" and question is not None:
        needed = question.policy.count if question.policy is not None else len(question.votes)
        return f"Your approval was counted ({len(question.votes)} of {needed}): it needs another person's too."
    if result.outcome in ("taken", "yours") and question is not None:
        return why_not_open(question) or "Another decision came first; nothing was recorded."
    if result.outcome == "expired" and question is not None:
        return why_not_open(question) or "This question expired: nothing was recorded."
    if result.outcome == "refused":
        return f"Your decision was not recorded: {result.errors.get('policy', 'the approval policy refused it')}"
    if result.outcome == "invalid":
        problems = "; ".join(f"{name}: {problem}" for name, problem in result.errors.items())
        return f"Your answer was not recorded: {problems}"
    if result.outcome == "running":
        return "The call is running already: it can no longer be decided."
    if result.outcome == "unknown":
        return "This question no longer exists."
    return None
