"""Background-work benchmarks: answer-to-model latency (embedded worker on SQLite and PostgreSQL, Celery),
and how many working tasks one embedded worker keeps checked on time.

Run from the repository root: ``python bench/jobs_bench.py [--postgres URL] [--broker URL] [--out FILE]``.
Workers run as real processes (``tarry worker``, ``celery worker``) with the agents of ``tests/jobs/tools.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

NOTIFY_MARKER = "<!-- bench/notify_bench.py: the section below is its own -->"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tarry.store import Store  # noqa: E402
from tests.jobs.tools import clerk  # noqa: E402


def model_times(markers: Path) -> list[float]:
    if not markers.exists():
        return []
    return [float(line.split()[2]) for line in markers.read_text().splitlines() if line.startswith("model ")]


def start(command: list[str], markers: Path, extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TARRY_TEST_MARKERS": str(markers), "PYTHONPATH": str(ROOT), **(extra or {})}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def latency(url: str, markers: Path, count: int, store_hooks: object = None) -> list[float]:
    """Seconds from an approval recorded to the chat's next model call, one chat at a time."""
    found = []
    async with Store(url) as store:
        if store_hooks is not None:
            store_hooks(store)  # type: ignore[operator]
        for number in range(count):
            chat = await store.create_chat(agent=clerk())
            await chat.ask(json.dumps([{"name": "transfer", "arguments": {"to": f"b{number}", "amount": 1}}]))
            (approval,) = await store.pending_questions(chat.id)
            seen = len(model_times(markers))
            began = time.time()
            await store.approve(approval.id)
            deadline = time.monotonic() + 30
            while len(model_times(markers)) <= seen:
                assert time.monotonic() < deadline, "the worker never called the model"
                await asyncio.sleep(0.002)
            found.append(model_times(markers)[-1] - began)
    return found


async def on_time(url: str, markers: Path, tasks: int, seconds: float) -> dict[str, float]:
    """Start ``tasks`` builds checked every second for ``seconds``; how late the checks came."""
    async with Store(url) as store:
        for number in range(tasks):
            chat = await store.create_chat(agent=clerk())
            build = {"order": f"t{number}", "seconds": seconds, "poll": 1.0}
            await chat.ask(json.dumps([{"name": "build", "arguments": build}]))
    worker = start(
        [sys.executable, "-m", "tarry.cli", "worker", "--agents", "tests.jobs.tools:clerk", "--url", url], markers
    )
    try:
        time.sleep(seconds + 3)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait()
    checks: dict[str, list[float]] = {}
    for line in markers.read_text().splitlines():
        kind, order, at = line.split()
        if kind == "build-check":
            checks.setdefault(order, []).append(float(at))
    gaps = sorted(b - a - 1.0 for times in checks.values() for a, b in itertools.pairwise(times))
    return {
        "tasks": tasks,
        "checks": sum(len(times) for times in checks.values()),
        "late_p50": statistics.median(gaps) if gaps else float("nan"),
        "late_p99": gaps[int(len(gaps) * 0.99) - 1] if gaps else float("nan"),
    }


async def cancel_latency(url: str, count: int) -> list[float]:
    """Seconds from ``store.cancel()`` to the worker having closed the chat's working call, one chat at a time."""
    found = []
    async with Store(url) as store:
        for number in range(count):
            chat = await store.create_chat(agent=clerk())
            await chat.ask(json.dumps([{"name": "long_work", "arguments": {"order": f"c{number}"}}]))
            deadline = time.monotonic() + 30
            while not (await store.pending_tasks(chat.id))[0].status_message.startswith("step "):
                assert time.monotonic() < deadline, "the worker never checked the task"
                await asyncio.sleep(0.01)
            began = time.monotonic()
            await store.cancel(chat.id)
            while await store.pending_tasks(chat.id):
                assert time.monotonic() < deadline + 30, "the cancel was never seen"
                await asyncio.sleep(0.005)
            found.append(time.monotonic() - began)
    return found


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[max(0, int(len(values) * 0.99) - 1)]
    return f"{statistics.median(values) * 1000:.0f} ms | {p99 * 1000:.0f} ms"


async def fresh(url: str) -> None:
    async with Store(url) as store:
        await store.setup()


def postgres_schema(base: str) -> str:
    import psycopg

    schema = f"tarry_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"))
    parser.add_argument("--broker", default=os.environ.get("TARRY_TEST_RABBITMQ_URL"))
    parser.add_argument("--redis", default=os.environ.get("TARRY_TEST_REDIS_URL"))
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-jobs.md"))
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    rows = []
    cancels: list[tuple[str, str]] = []
    targets = [("embedded worker, SQLite", f"sqlite:///{folder / 'bench.db'}")]
    if arguments.postgres:
        targets.append(("embedded worker, PostgreSQL", postgres_schema(arguments.postgres)))
    for label, url in targets:
        await fresh(url)
        markers = folder / f"markers-{len(rows)}"
        worker = start(
            [sys.executable, "-m", "tarry.cli", "worker", "--agents", "tests.jobs.tools:clerk", "--url", url], markers
        )
        time.sleep(2)  # let the worker import and connect before timing
        try:
            rows.append((label, percentiles(await latency(url, markers, arguments.count))))
            cancels.append((label, percentiles(await cancel_latency(url, max(5, arguments.count // 5)))))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait()
    brokers = [broker for broker in (arguments.broker, arguments.redis) if broker]
    for broker in brokers if arguments.postgres else []:
        url = postgres_schema(arguments.postgres)
        await fresh(url)
        markers = folder / f"markers-celery-{broker.split(':')[0]}"
        extra = {"TARRY_TEST_CELERY_BROKER": broker, "TARRY_TEST_CELERY_DB": url,
                 "TARRY_TEST_CELERY_QUEUE": f"tarry-bench-{uuid.uuid4().hex[:6]}"}  # fmt: skip
        os.environ.update(extra)
        from tarry.jobs.celery import enqueue_on_decisions
        from tests.jobs.celery_app import make_app

        app = make_app(broker, url)
        worker = start([sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", "worker", "--pool", "threads",
                        "--concurrency", "4", "--loglevel", "WARNING"], markers, extra)  # fmt: skip
        time.sleep(4)
        try:
            found = await latency(url, markers, arguments.count, partial(enqueue_on_decisions, app=app))
            rows.append((f"Celery ({broker.split(':')[0]} broker), PostgreSQL", percentiles(found)))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait()
    loads = []
    if arguments.postgres:
        for tasks in (100, 300, 600):
            url = postgres_schema(arguments.postgres)
            await fresh(url)
            loads.append(await on_time(url, folder / f"markers-load-{tasks}", tasks, 8.0))
    lines = [
        "# Background work: benchmarks",
        "",
        f"Measured by `bench/jobs_bench.py` on {datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}), on a machine shared with other jobs.",
        "",
        f"## From an answer recorded to the chat's next model call ({arguments.count} chats, one at a time)",
        "",
        "| worker | p50 | p99 |",
        "|---|---|---|",
        *(f"| {label} | {figures} |" for label, figures in rows),
        "",
        "The embedded worker is woken by LISTEN/NOTIFY on PostgreSQL, and on SQLite by the file's `data_version`,",
        "which it reads every 20 ms.",
        "",
        "## From `store.cancel()` to the working call closed (embedded worker, a task checked every 0.2 s)",
        "",
        "| worker | p50 | p99 |",
        "|---|---|---|",
        *(f"| {label} | {figures} |" for label, figures in cancels),
        "",
        "The worker looks for a cancellation before each step and every 0.5 s while one runs.",
        "",
        "## Working tasks one embedded worker keeps checked on time (PostgreSQL, `poll_interval` 1 s, 8 s)",
        "",
        "| tasks | checks | lateness p50 | lateness p99 |",
        "|---|---|---|---|",
        *(
            f"| {load['tasks']} | {load['checks']:.0f} | {load['late_p50'] * 1000:.0f} ms "
            f"| {load['late_p99'] * 1000:.0f} ms |"
            for load in loads
        ),
        "",
        "Lateness is how much later than `poll_interval` a task was checked again (default concurrency 16).",
        "",
    ]
    out = Path(arguments.out)
    kept = out.read_text().partition(NOTIFY_MARKER) if out.exists() else ("", "", "")
    # bench/notify_bench.py's section stays as that bench wrote it.
    out.write_text("\n".join(lines) + ("\n\n" + kept[1] + kept[2] if kept[1] else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
