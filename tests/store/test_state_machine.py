"""A stateful property test of the store: random interleavings across three real processes, on SQLite and PostgreSQL.

Hypothesis picks a sequence of steps: ask (the model then makes calls that need an approval, ask
a question, or run until released), approve, decline or answer a pending question (sometimes two
processes racing on it, one approving, one declining), cancel, complete, release a running tool,
``kill -9`` a process (a new one takes its place), and pause a process until its leases run out.
Commands overlap: a process runs each as its own task, and a step does not wait for the last.
After every step, and after each run once everything is settled, the invariants are checked:

- one decision per question: at most one process is told it recorded it, and the database holds that one;
- at most one run of each non-idempotent call (the tools leave a marker as they start), and a transfer
  runs only once approved;
- every call ends with exactly one result, and no result belongs to no call;
- the transcript makes a valid request for every provider adapter;
- one model reply per turn;
- no chat stays stuck past its lease: once the processes are idle, every claim runs out within a
  lease, and then deciding what is left and completing each chat ends it with the model's reply
  (one round, or two when the model still owed a turn that makes new calls).

A failure reports the steps of the run that failed: Hypothesis replays a failing run to report it,
but not its timing, so its own report may show a different run (or a "flaky" error).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import Connection, select

from tarry import Chat, Message, Question
from tarry.calls import CallRecord
from tarry.messages import ModelRequest
from tarry.store import Store
from tarry.store.tables import chats, tool_calls
from tests.store.machine_worker import KINDS, hang_files, planned_text
from tests.store.test_processes import finish as finish_proc
from tests.store.test_processes import start as start_proc
from tests.store.tools import all_tools
from tests.store.wire import check_for_every_provider
from tests.store.workers import Worker

T = TypeVar("T")
LEASE = 1.0
WORKERS = 3
CHATS = 2
REPLY_TIMEOUT = 60.0
STEP_WAIT = 1.0
EXPECTED = {"ask": {"PendingToolCallsError"}, "decline": {"ToolCallRunningError"}}
"""The errors a command may raise in a correct store: asking while calls wait, declining a call being carried on."""
WHO = st.integers(0, WORKERS - 1)
CHAT = st.integers(0, CHATS - 1)
PLAN = st.lists(st.sampled_from(KINDS), min_size=1, max_size=3)
DECIDES = {"approve": "accept", "answer": "accept", "decline": "decline"}
MACHINE_SETTINGS = settings(
    max_examples=6,
    stateful_step_count=20,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # real processes and timing: shrinking would not replay
    suppress_health_check=list(HealthCheck),
)


class Lab:
    """The processes, the folder they share, and a store in this process that watches the database."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self.markers = folder / "markers"
        self.runner = asyncio.Runner()
        self.store = Store(url)
        self.run(self.store.setup())
        self.workers = [self._start(number) for number in range(WORKERS)]
        self.retired: list[Worker] = []
        self._refs = 0
        self.outcomes: Counter[str] = Counter()
        """How the calls of every run ended."""
        self.failures: list[str] = []
        """The first failed check, with the steps that led to it."""

    def _start(self, number: int) -> Worker:
        return Worker(self.url, LEASE, self.folder, self.markers, self.folder / f"worker-{number}.log")

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on this process's event loop (the watching store lives there)."""
        return self.runner.run(work)

    def replace(self, number: int) -> None:
        """Kill worker ``number`` with SIGKILL and start a new one in its place."""
        self.workers[number].kill()
        self.retired.append(self.workers[number])
        self.workers[number] = self._start(number)

    def new_ref(self) -> str:
        self._refs += 1
        return f"r{self._refs}"

    def marked(self, kind: str) -> Counter[str]:
        """How often each tool of ``kind`` started, by its marker."""
        if not self.markers.exists():
            return Counter()
        lines = self.markers.read_text().splitlines()
        return Counter(line.split(" ", 1)[1] for line in lines if line.startswith(kind + " "))

    def live_claims(self, chat_ids: list[str], owner: str | None = None) -> list[Any]:
        """Unexpired claims on these chats' calls and model turns (of ``owner``, when given)."""

        def read(connection: Connection) -> list[Any]:
            now = datetime.now(UTC)  # the real time, which the processes read too
            found: list[Any] = []
            for table, chat_column in ((tool_calls, tool_calls.c.chat_id), (chats, chats.c.id)):
                query = select(table.c.claimed_by, table.c.claimed_until).where(
                    chat_column.in_(chat_ids), table.c.claimed_until >= now
                )
                if owner is not None:
                    query = query.where(table.c.claimed_by == owner)
                found.extend(connection.execute(query).all())
            return found

        return self.run(self.store.db.run_read(read))

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.run(self.store.close())
        self.runner.close()


@contextmanager
def lab_on(url: str, folder: Path) -> Iterator[Lab]:
    lab = Lab(url, folder)
    try:
        yield lab
    finally:
        lab.close()


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``condition()`` holds (polling), failing with ``what`` after ``timeout`` seconds."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, what
        time.sleep(0.05)


class StoreMachine(RuleBasedStateMachine):
    """Random interleavings of the store's verbs, kills and lapsed leases, checked against the invariants."""

    def __init__(self, lab: Lab) -> None:
        super().__init__()
        self.lab = lab
        self.chat_ids: list[str] = []
        self.releases: list[Path] = []
        """The release file of every hanging call the model was asked to make."""
        self.trail: list[str] = []
        """What this run did, in order: replaying a run does not replay its timing, so a failure reports it."""

    def send(self, who: int, op: str, **fields: Any) -> tuple[Worker, int]:
        worker = self.lab.workers[who]
        with self.reported():
            number = worker.send(op, **fields)
        self.trail.append(f"worker {who} (pid {worker.process.pid}) #{number}: {op} {fields}")
        return worker, number

    @contextmanager
    def reported(self) -> Iterator[None]:
        """Keep the first failure with the trail that led to it (Hypothesis's replay may fail elsewhere, or not)."""
        try:
            yield
        except Exception as error:
            if not self.lab.failures:
                self.lab.failures.append("\n".join([*self.trail, f"failed: {error}"]))
            raise

    def pending(self) -> list[Question]:
        return [
            question
            for chat_id in self.chat_ids
            for question in self.lab.run(self.lab.store.pending_questions(chat_id))
        ]

    # Steps (with ``pause``, a step gives its commands up to STEP_WAIT seconds to finish before the next)

    def command(self, who: int, pause: bool, op: str, **fields: Any) -> None:
        worker, number = self.send(who, op, **fields)
        if pause:
            worker.answered(number, STEP_WAIT)

    @initialize(plans=st.lists(PLAN, min_size=CHATS, max_size=CHATS), who=WHO)
    def open_chats(self, plans: list[list[str]], who: int) -> None:
        """Open the chats and ask in each, so calls are in flight whichever steps follow."""
        self.chat_ids = [self.lab.run(self.lab.store.create_chat()).id for _ in range(CHATS)]
        for chat, kinds in enumerate(plans):
            self.ask(chat, kinds, (who + chat) % WORKERS, pause=False)

    @rule(chat=CHAT, kinds=PLAN, who=WHO, pause=st.booleans())
    def ask(self, chat: int, kinds: list[str], who: int, pause: bool) -> None:
        ref = self.lab.new_ref()
        for number, kind in enumerate(kinds):
            if kind in ("hang", "idem"):
                _, release = hang_files(str(self.lab.folder), f"{ref}.{number}", kind)
                self.releases.append(Path(release))
        self.command(who, pause, "ask", chat=self.chat_ids[chat], text=planned_text(ref, kinds))

    @rule(chat=CHAT, who=WHO, pause=st.booleans())
    def complete(self, chat: int, who: int, pause: bool) -> None:
        self.command(who, pause, "complete", chat=self.chat_ids[chat])

    @rule(chat=CHAT, who=WHO, pause=st.booleans())
    def cancel(self, chat: int, who: int, pause: bool) -> None:
        self.command(who, pause, "cancel", chat=self.chat_ids[chat])

    @rule(pick=st.integers(0, 99), accept=st.booleans(), pause=st.booleans(),
          racers=st.lists(WHO, min_size=1, max_size=2, unique=True))  # fmt: skip
    def decide(self, pick: int, accept: bool, racers: list[int], pause: bool) -> None:
        """Decide a pending question; with two racers, one accepts and the other declines at once."""
        pending = self.pending()
        if not pending:
            return
        question = pending[pick % len(pending)]
        sent = []
        for number, who in enumerate(racers):
            if accept != (number == 0):
                sent.append(self.send(who, "decline", question=question.id, note=f"no from {who}"))
            elif question.kind == "approval":
                sent.append(self.send(who, "approve", question=question.id))
            else:
                values = {"colour": ("red", "blue")[pick % 2], "coats": 1 + pick % 3}
                sent.append(self.send(who, "answer", question=question.id, values=values))
        for worker, number in sent if pause else ():
            worker.answered(number, STEP_WAIT)

    @rule(pick=st.integers(0, 99))
    def release(self, pick: int) -> None:
        """Let one hanging call (running or yet to run) return."""
        held = [release for release in self.releases if not release.exists()]
        if held:
            held[pick % len(held)].touch()
            self.trail.append(f"released {held[pick % len(held)].name}")

    @rule(who=WHO, kill=st.booleans(), holder=st.booleans())
    def fault(self, who: int, kill: bool, holder: bool) -> None:
        """``kill -9`` a process (another starts in its place), or let its leases lapse.

        With ``holder``, the process is one that holds a claim right now (running a tool, say), if any does.
        """
        if holder:
            claimants = {row.claimed_by for row in self.lab.live_claims(self.chat_ids)}
            holders = [number for number, worker in enumerate(self.lab.workers) if worker.started_as() in claimants]
            who = holders[who % len(holders)] if holders else who
        self.trail.append(f"{'kill -9' if kill else 'pause until its leases lapse:'} worker {who}")
        if kill:
            self.lab.replace(who)
            return
        worker = self.lab.workers[who]
        owner = worker.owner
        worker.pause()  # it holds its claims but renews none
        try:
            with self.reported():
                poll(lambda: not self.lab.live_claims(self.chat_ids, owner), LEASE + 10, "a lease never ran out")
        finally:
            worker.resume()

    # Invariants

    @invariant()
    def invariants_hold(self) -> None:
        """One decision per question, at most one run per non-idempotent call, at most one result per call."""
        if not self.chat_ids:
            return
        with self.reported():
            self.check_stored()

    def check_stored(self) -> None:
        self.check_replies()
        loaded = [self.lab.run(self.lab.store.load_chat(chat_id, tools=all_tools())) for chat_id in self.chat_ids]
        for chat in loaded:
            results = Counter(message.tool_call_id for message in chat.messages if message.role == "tool")
            assert set(results) <= set(chat.records), f"a result for no call: {set(results) - set(chat.records)}"
            assert set(results.values()) <= {1}, f"a call has two results: {results}"
            roles = [message.role for message in chat.messages]
            assert ("assistant", "assistant") not in itertools.pairwise(roles), f"a turn got two model replies: {roles}"
        self.check_runs(loaded)

    def check_replies(self) -> None:
        """No command crashed or raised what a correct store never raises; one winner per question, as stored."""
        winners: dict[str, list[str]] = {}
        for worker in [*self.lab.retired, *self.lab.workers]:
            for number, reply in list(worker.replies.items()):
                if number == 0:
                    continue
                command, raised = worker.sent[number], reply.get("raised")
                assert "crashed" not in reply, f"{command} crashed:\n{reply['crashed']}"
                assert raised in (None, *EXPECTED.get(command["op"], ())), f"{command}: {raised}: {reply['message']}"
                if command["op"] in DECIDES and reply.get("value") is True:
                    winners.setdefault(command["question"], []).append(DECIDES[command["op"]])
        for question_id, decisions in winners.items():
            assert len(decisions) == 1, f"question {question_id} was decided {len(decisions)} times: {decisions}"
            stored = self.lab.run(self.lab.store.question(question_id)).decision
            assert stored == decisions[0], f"question {question_id}: told {decisions[0]}, stored {stored}"

    def check_runs(self, loaded: list[Chat]) -> None:
        """Non-idempotent calls started at most once; a transfer only once approved."""
        transfers = self.lab.marked("transfer")
        assert set(transfers.values()) <= {1}, f"a transfer ran twice: {transfers}"
        twice = {path: count for path, count in self.lab.marked("hang").items() if ".hang." in path and count > 1}
        assert not twice, f"a non-idempotent call ran twice: {twice}"
        for chat in loaded:
            for record in chat.records.values():
                if record.call.name == "transfer_money" and f"{record.call.arguments['to']}:1" in transfers:
                    assert record.approval is not None and record.approval.decision == "accept", record

    def teardown(self) -> None:
        try:
            if self.chat_ids:
                with self.reported():
                    self.settle()
        finally:
            for release in self.releases:
                release.touch()

    def settle(self) -> None:
        """Let everything finish; then no chat may stay stuck once its leases ran out, and every call has one result."""
        for release in self.releases:
            release.touch()
        for worker in self.lab.workers:
            poll(lambda worker=worker: not worker.outstanding(), REPLY_TIMEOUT, f"worker {worker.process.pid} hangs")
        self.invariants_hold()
        poll(lambda: not self.lab.live_claims(self.chat_ids), LEASE + 10, "a claim outlived its lease")
        for attempt in range(2):  # a second round for the calls of a turn the model still owed
            for question in self.pending():
                values = {} if question.kind == "approval" else {"colour": "red"}
                worker, number = self.send(attempt % WORKERS, "answer", question=question.id, values=values)
                worker.wait(number, REPLY_TIMEOUT)
            for index, chat_id in enumerate(self.chat_ids):
                worker, number = self.send((attempt + index) % WORKERS, "complete", chat=chat_id)
                worker.wait(number, REPLY_TIMEOUT)
        self.check_stored()
        for chat_id in self.chat_ids:
            chat = self.lab.run(self.lab.store.load_chat(chat_id, tools=all_tools()))
            if not chat.messages:
                continue
            assert not chat.waiting, f"chat {chat_id} is stuck: {[r for r in chat.records.values() if r.open]}"
            assert chat.messages[-1].role == "assistant", f"chat {chat_id} ends without the model's reply"
            check_for_every_provider(chat.messages, list(chat.tools.values()))
            for record in chat.records.values():
                assert record.result is not None
                self.lab.outcomes[outcome_of(record)] += 1


def outcome_of(record: CallRecord) -> str:
    """How a closed call ended, checked against its decisions: ran, declined, cancelled or interrupted."""
    assert record.result is not None
    value, call = record.result.result(), record.call
    question = record.questions[-1] if record.questions else None
    if not isinstance(value, dict):
        if call.name == "pick_colour":
            assert question is not None and question.decision == "accept" and question.answer is not None
            assert (
                value == f"{call.arguments['wall']}: {question.answer['coats']} coat(s) of {question.answer['colour']}"
            )
        return "ran"
    error = value["error"]
    if "declined" in error:
        assert question is not None and question.decision == "decline", record
        assert value.get("note") == question.note, f"{call.name}: the model got {value}, the note was {question.note}"
        return "declined"
    for outcome in ("cancelled", "interrupted"):
        if outcome in error:
            return outcome
    raise AssertionError(f"The {call.name} call ended unexpectedly: {value}")


def test_random_interleavings_across_processes_keep_every_invariant(database_url: str, tmp_path: Path) -> None:
    with lab_on(database_url, tmp_path) as lab:
        try:
            run_state_machine_as_test(lambda: StoreMachine(lab), settings=MACHINE_SETTINGS)
        except Exception as error:
            if lab.failures:
                raise AssertionError(lab.failures[0]) from error
            raise
    assert lab.outcomes["ran"] > 0, f"no call ran: {lab.outcomes}"


class StalledModel:
    """A model whose request stalls this process (no lease renewal) while another process takes the turn over."""

    name = "scripted:stalled"

    def __init__(self, take_over: Callable[[], None]) -> None:
        self.take_over = take_over

    async def complete(self, request: ModelRequest) -> Message:
        self.take_over()  # blocks the event loop, as a CPU-bound step or a paused process would
        return Message("assistant", "the stalled process's reply")


def test_a_process_that_lost_its_turn_claim_records_no_second_reply(database_url: str, tmp_path: Path) -> None:
    def take_over() -> None:
        started = time.monotonic()
        while True:  # the other process parks while our claim holds; once it lapsed, it asks the model itself
            other = start_proc("run", database_url, chat_id, "0.5", "[]", markers=tmp_path / "markers")
            if json.loads(finish_proc(other))["reply"] is not None:
                return
            assert time.monotonic() - started < 60, "the other process never took the turn over"

    async def scenario() -> list[Message]:
        async with Store(database_url, lease=0.5) as store:
            await store.setup()
            chat = await store.create_chat(StalledModel(take_over))
            nonlocal chat_id
            chat_id = chat.id
            await chat.ask("Hello")
            return (await store.load_chat(chat.id)).messages

    chat_id = ""
    messages = asyncio.run(scenario())
    assert [(message.role, message.content) for message in messages] == [("user", "Hello"), ("assistant", "")], (
        "the stalled process's reply was recorded too"
    )
