"""Pruning benchmark: decision latency while ``tarry db prune`` removes many finished chats, and bytes per chat.

Run from the repository root: ``python bench/prune_bench.py [--postgres URL] [--chats N] [--out FILE]``.

On PostgreSQL, N finished chats are made by copying one real finished chat (made through the API) in SQL, and
waiting approvals through the API. A decider process approves them one at a time at a steady pace and times each
decision: first alone, then while ``tarry db prune`` (its own process) removes the N finished chats. On SQLite,
the file's bytes per chat before and after a prune (through the API, fewer chats).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import Connection, text  # noqa: E402

from tarry import Message, Tool  # noqa: E402
from tarry.clock import utcnow  # noqa: E402
from tarry.store import Store  # noqa: E402
from tarry.store.prune import sqlite_space  # noqa: E402
from tarry.testing import ScriptedModel  # noqa: E402

CALLS_PER_CHAT = 50
"""Approvals each waiting chat asks for at once (fewer chats to make for as many decisions)."""
WAITING_CHATS = 400
"""Waiting chats by default: enough approvals for the decider to go on deciding for as long as the prune runs."""
PACE = 0.01
"""Seconds between the starts of two decisions."""
GOAL = 2.0
"""Decision latency p99 while a prune runs, at most this many times its value without (issue 38)."""


class Transfer(Tool):
    """Moves money; needs approval."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        return f"Sent {amount} to {to}"


def model(calls: int) -> ScriptedModel:
    def turn(history: list[Message]) -> Any:
        if history[-1].role == "user":
            return [{"name": "transfer", "arguments": {"amount": 5, "to": f"P{i}"}} for i in range(calls)]
        return "Done."

    return ScriptedModel([turn] * 10)


async def finished_chat(store: Store) -> str:
    """A chat that asked an approval, got it, ran the call and ended with the model's reply."""
    chat = await store.create_chat(model(1), [Transfer()])
    await chat.ask("Pay P0.")
    (question,) = await chat.pending_questions()
    await store.approve(question.id, by="bench")
    await chat.complete()
    assert not chat.waiting
    return chat.id


CLONE = [
    """INSERT INTO tarry_chats (id, model, agent, instructions, tool_choice, settings, created_at, version,
        message_count, schedule_version)
       SELECT 'bench-' || lpad(g::text, 8, '0'), model, agent, instructions, tool_choice, settings, created_at,
        version, message_count, schedule_version
       FROM tarry_chats, generate_series(1, :n) g WHERE id = :template""",
    """INSERT INTO tarry_messages (chat_id, position, role, content, tool_calls, tool_call_id, usage, created_at,
        provider_data)
       SELECT 'bench-' || lpad(g::text, 8, '0'), position, role, content, tool_calls, tool_call_id, usage,
        created_at, provider_data
       FROM tarry_messages, generate_series(1, :n) g WHERE chat_id = :template""",
    """INSERT INTO tarry_tool_calls (chat_id, message_position, call_id, name, arguments, needs_approval, state,
        waiting_on, version, result_message_id, created_at)
       SELECT c.id, t.message_position, t.call_id, t.name, t.arguments, t.needs_approval, t.state, t.waiting_on,
        t.version, m.id, t.created_at
       FROM tarry_tool_calls t JOIN tarry_messages r ON r.id = t.result_message_id
        JOIN tarry_chats c ON c.id LIKE 'bench-%'
        JOIN tarry_messages m ON m.chat_id = c.id AND m.position = r.position
       WHERE t.chat_id = :template""",
    """INSERT INTO tarry_questions (id, chat_id, tool_call_id, number, kind, message, requested_schema, url, source,
        key, extra, asked_at, expires_at, decision, answer, note, decided_at, policy, votes, decided_by,
        decided_by_name, channel)
       SELECT gen_random_uuid()::text, n.chat_id, n.id, q.number, q.kind, q.message, q.requested_schema, q.url,
        q.source, q.key, q.extra, q.asked_at, q.expires_at, q.decision, q.answer, q.note, q.decided_at, q.policy,
        q.votes, q.decided_by, q.decided_by_name, q.channel
       FROM tarry_questions q JOIN tarry_tool_calls t ON t.id = q.tool_call_id
        JOIN tarry_tool_calls n ON n.call_id = t.call_id AND n.chat_id LIKE 'bench-%'
       WHERE q.chat_id = :template""",
    """INSERT INTO tarry_decision_events (at, chat_id, question_id, call_id, tool, arguments, kind, message,
        decision, outcome, answer, note, by_id, by_name, channel, detail)
       SELECT e.at, q.chat_id, q.id, e.call_id, e.tool, e.arguments, e.kind, e.message, e.decision, e.outcome,
        e.answer, e.note, e.by_id, e.by_name, e.channel, e.detail
       FROM tarry_decision_events e JOIN tarry_questions q ON q.chat_id LIKE 'bench-%'
       WHERE e.chat_id = :template""",
    "ANALYZE",
]
"""Copies of the template chat's rows, N times, with the ids and references of each copy."""


async def seed_postgres(url: str, finished: int, waiting_chats: int) -> list[str]:
    """N finished chats (copies of one), and the ids of the waiting chats' questions."""
    async with Store(url) as store:
        await store.setup()
        template = await finished_chat(store)

        def clone(connection: Connection) -> None:
            for statement in CLONE[:-1]:
                connection.execute(text(statement), {"n": finished, "template": template})

        await store.db.run_write(clone)
        await store.db.run_alone(lambda connection: connection.execute(text("ANALYZE")), write=True)
        for _ in range(waiting_chats):
            chat = await store.create_chat(model(CALLS_PER_CHAT), [Transfer()])
            await chat.ask("Pay everyone.")
        return [question.id for question in await store.pending_questions()]


async def decider(url: str, ids_file: str, out_file: str, go_file: str, stop_file: str, count: str) -> None:
    """Once ``go_file`` exists, approve questions at a steady pace, timing each, until ``count`` are done or
    ``stop_file`` exists."""
    ids = json.loads(Path(ids_file).read_text())[: int(count)]
    latencies = []
    async with Store(url) as store:
        await store.pending_questions(limit=1)
        while not Path(go_file).exists():
            await asyncio.sleep(0.005)
        next_start = time.perf_counter()
        for question_id in ids:
            if Path(stop_file).exists():
                break
            started = time.perf_counter()
            assert await store.approve(question_id)
            latencies.append(time.perf_counter() - started)
            next_start += PACE
            await asyncio.sleep(max(0.0, next_start - time.perf_counter()))
    Path(out_file).write_text(json.dumps(latencies))


def start_decider(url: str, ids: list[str], folder: Path, name: str, count: int) -> tuple[subprocess.Popen[str], Path]:
    ids_file, out_file = folder / f"{name}-ids.json", folder / f"{name}-latencies.json"
    ids_file.write_text(json.dumps(ids))
    command = [sys.executable, __file__, "--decider", url, str(ids_file), str(out_file), str(folder / f"{name}-go"),
               str(folder / "stop"), str(count)]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=environment(), text=True), out_file


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def figures(latencies: list[float]) -> dict[str, float]:
    return {"n": len(latencies), "p50": percentile(latencies, 0.5) * 1000, "p99": percentile(latencies, 0.99) * 1000}


async def postgres_run(base: str, finished: int, baseline: int, waiting: int) -> dict[str, Any]:
    url = postgres_schema(base)
    folder = Path(tempfile.mkdtemp())
    seeded = time.perf_counter()
    ids = await seed_postgres(url, finished, waiting)
    seeded = time.perf_counter() - seeded
    alone, out = start_decider(url, ids[:baseline], folder, "alone", baseline)
    (folder / "alone-go").touch()
    await asyncio.to_thread(alone.wait)
    without = figures(json.loads(out.read_text()))
    during, out = start_decider(url, ids[baseline:], folder, "during", len(ids))
    await asyncio.sleep(3)  # the decider imports and connects, then starts deciding as the prune starts
    (folder / "during-go").touch()
    began = time.perf_counter()
    cutoff = utcnow().isoformat()
    command = [sys.executable, "-c", "from tarry.cli import main; raise SystemExit(main())", "db", "prune",
               "--url", url, "--finished-before", cutoff]  # fmt: skip
    run = partial(subprocess.run, command, cwd=ROOT, env=environment(), capture_output=True, text=True, check=True)
    pruned = await asyncio.to_thread(run)
    took = time.perf_counter() - began
    (folder / "stop").touch()
    await asyncio.to_thread(during.wait)
    with_prune = figures(json.loads(out.read_text()))
    with_prune["ran_out"] = len(ids) - baseline == with_prune["n"]
    drop_schema(base, url)
    return {"finished": finished, "waiting": waiting, "seconds": took, "seeded": seeded,
            "output": pruned.stdout.strip(), "without": without, "during": with_prune}  # fmt: skip


async def sqlite_run(chats: int) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp())
    async with Store(f"sqlite:///{folder / 'bench.db'}", durability="fast") as store:
        await store.setup()
        empty = await sqlite_space(store)
        for _ in range(chats):
            await finished_chat(store)
        full = await sqlite_space(store)
        report = await store.prune(finished_before=utcnow())
        emptied = await sqlite_space(store)
    assert empty is not None and full is not None and emptied is not None and report.chats == chats
    return {"chats": chats, "empty": empty.size, "full": full.size, "after": emptied.size, "free": emptied.free}


def postgres_schema(base: str) -> str:
    import psycopg

    schema = f"tarry_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


def drop_schema(base: str, url: str) -> None:
    import psycopg

    schema = url.rsplit("%3D", 1)[1]
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def page(postgres: dict[str, Any] | None, sqlite: dict[str, Any], started: float, load: float) -> str:
    lines = [
        "# Benchmarks: pruning",
        "",
        "Regenerate with `python bench/prune_bench.py --postgres URL --chats N` (the PostgreSQL part needs a server",
        "where the run may create a schema; it drops it at the end).",
        "",
        f"Measured on {datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, in {time.perf_counter() - started:.0f} s. One-minute load average "
        f"{load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end: the machine was shared with other work,",
        "and absolute figures are noisy.",
        "",
    ]
    if postgres is not None:
        without, during = postgres["without"], postgres["during"]
        ratio = during["p99"] / without["p99"]
        lines += [
            "## Decision latency while a prune runs (PostgreSQL)",
            "",
            f"{postgres['finished']:,} finished chats (each: 4 messages, a call, its decided approval, one trail "
            f"event), copied in SQL from one made through the API (which is pruned too), and "
            f"{postgres['waiting']} waiting chats of {CALLS_PER_CHAT} approvals each. A decider process approves "
            f"one question every {PACE * 1000:.0f} ms and times each `Store.approve`: alone, then while "
            f"`tarry db prune` (another process, batches of 500) removes all {postgres['finished']:,} finished "
            "chats, which took "
            f"{postgres['seconds']:.0f} s ({postgres['finished'] / postgres['seconds']:,.0f} chats a second).",
            "",
            "| decisions | n | p50 | p99 |",
            "|---|---|---|---|",
            f"| alone | {without['n']} | {without['p50']:.2f} ms | {without['p99']:.2f} ms |",
            f"| while the prune runs | {during['n']} | {during['p50']:.2f} ms | {during['p99']:.2f} ms |",
            "",
            f"p99 while pruning is {ratio:.2f}× its value alone (goal: at most {GOAL:.0f}×): "
            f"{'met' if ratio <= GOAL else 'not met'}."
            + (" The decider ran out of questions before the prune ended." if during["ran_out"] else ""),
            "",
            "What `tarry db prune` printed:",
            "",
            "```text",
            postgres["output"],
            "```",
            "",
        ]
    lines += [
        "## Bytes per chat (SQLite)",
        "",
        f"{sqlite['chats']:,} finished chats made through the API in a new file (`auto_vacuum=INCREMENTAL`), then"
        " pruned.",
        "",
        "| | file | per chat |",
        "|---|---|---|",
        f"| empty schema | {sqlite['empty']:,} B | |",
        f"| with the chats | {sqlite['full']:,} B | {(sqlite['full'] - sqlite['empty']) / sqlite['chats']:,.0f} B |",
        f"| after the prune | {sqlite['after']:,} B ({sqlite['free']:,} B free pages) | "
        f"{(sqlite['after'] - sqlite['empty']) / sqlite['chats']:,.0f} B |",
        "",
        "What stays is the trail, kept by default: a row per decision.",
        "",
    ]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"))
    parser.add_argument("--chats", type=int, default=100_000, help="finished chats the PostgreSQL prune removes")
    parser.add_argument("--baseline", type=int, default=1000, help="decisions timed without a prune")
    parser.add_argument("--waiting", type=int, default=WAITING_CHATS, help="waiting chats of 50 approvals each")
    parser.add_argument("--sqlite-chats", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-pruning.md"))
    arguments = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    postgres = None
    if arguments.postgres:
        postgres = await postgres_run(arguments.postgres, arguments.chats, arguments.baseline, arguments.waiting)
    sqlite = await sqlite_run(arguments.sqlite_chats)
    Path(arguments.out).write_text(page(postgres, sqlite, started, load))
    print(Path(arguments.out).read_text())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--decider"]:
        asyncio.run(decider(*sys.argv[2:]))
    else:
        asyncio.run(main())
