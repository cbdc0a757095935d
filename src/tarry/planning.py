"""Planning a round of carrying calls on: from the call records alone, which calls can go on and which tools lack."""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable
from dataclasses import dataclass
from datetime import datetime

from tarry.calls import CallRecord, CallState, Standing, call_state


@dataclass(frozen=True)
class Step:
    """A call that can go on: it runs its tool (or resumes its task), or it closes with an error result."""

    record: CallRecord
    standing: Standing
    """Where the call stood when planned: ``RUNS`` or ``CLOSES``. The carrier looks again under the call's
    claim, since another process may have moved the call on since."""


@dataclass(frozen=True)
class Plan:
    """What a round of carrying calls on would do, as the chat holds its calls at one moment."""

    steps: tuple[Step, ...]
    """The calls that can go on, in the order the model made them; each is taken under a claim."""
    missing: tuple[str, ...]
    """The tools the chat lacks that calls which paused (so their tools were known) would now run, by name."""

    @property
    def claims(self) -> bool:
        """Whether carrying the plan out claims calls: some can go on, and no tool lacks."""
        return bool(self.steps) and not self.missing


def plan(records: Iterable[CallRecord], tools: Container[str], now: datetime, *, ran: Collection[str] = ()) -> Plan:
    """The plan for ``records`` at ``now``, with ``tools`` the names of the chat's tools and ``ran`` the ids of the
    calls whose tool code already ran in this round.

    Pure, built on ``call_state``: it reads the records and changes nothing.
    """
    steps: list[Step] = []
    missing: set[str] = set()
    for record in records:
        standing = call_state(record, now, checked=record.call.id in ran)
        if standing.state in (CallState.RUNS, CallState.CLOSES):
            steps.append(Step(record, standing))
        # A call that paused had its tool; one that still waits, or closes without its tool, needs none now.
        paused = bool(record.questions) or record.task is not None
        if standing.state is CallState.RUNS and paused and record.call.name not in tools:
            missing.add(record.call.name)
    return Plan(tuple(steps), tuple(sorted(missing)))
