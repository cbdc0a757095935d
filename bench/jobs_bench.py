"""Background-work benchmarks: answer-to-model latency (embedded worker on SQLite and PostgreSQL, Celery),
and how many working tasks one embedded worker (and one Celery worker) keeps checked on time.

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
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

NOTIFY_MARKER = "<!-- bench/notify_bench.py: the section below is its own -->"
LATE = ("late_p50", "late_p99")
SWEEP_TITLE = "## Working tasks one embedded worker keeps checked on time"
CELERY_TITLE = "## Working tasks one Celery worker keeps checked on time"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tarry.store import Store  # noqa: E402
from tests.jobs.tools import clerk  # noqa: E402


def model_times(markers: Path) -> list[float]:
    if not markers.exists():
        return []
    return [float(line.split()[2]) for line in markers.read_text().splitlines() if line.startswith("model ")]


def start(
    command: list[str], markers: Path, extra: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TARRY_TEST_MARKERS": str(markers), "PYTHONPATH": path, **(extra or {})}
    errors = subprocess.DEVNULL if log is None else log.open("a")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errors)


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


async def seed_tasks(url: str, tasks: int) -> None:
    """``tasks`` chats, each waiting on a build that works for an hour and asks to be checked every second."""
    async with Store(url) as store:
        limit = asyncio.Semaphore(8)

        async def one(number: int) -> None:
            async with limit:
                chat = await store.create_chat(agent=clerk())
                build = {"order": f"t{number}", "seconds": 3600.0, "poll": 1.0}
                await chat.ask(json.dumps([{"name": "build", "arguments": build}]))

        await asyncio.gather(*(one(number) for number in range(tasks)))


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process ``pid`` used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backends(base: str, application: str) -> list[int]:
    """The PostgreSQL backends of the connections named ``application``."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as connection:
        query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        return [row[0] for row in connection.execute(query, (application,))]


def with_application(url: str, application: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={application}"


async def on_time(
    url: str,
    markers: Path,
    tasks: int,
    seconds: float,
    check_batch: int,
    base: str | None,
    workers: int = 1,
    broker: str | None = None,
) -> dict[str, Any]:
    """Run ``workers`` worker processes (batches of ``check_batch``; 0: a full step each; with ``broker``, Celery
    workers of ``tests/jobs/celery_app.py``, batches of 256) on the seeded tasks for ``seconds`` after a warm-up; how
    late the checks came, and the CPU each check cost."""
    markers.unlink(missing_ok=True)
    application = f"tarry-bench-{uuid.uuid4().hex[:8]}"
    target = with_application(url, application) if base else url
    command = [sys.executable, "-m", "tarry.cli", "worker", "--agents", "tests.jobs.tools:clerk", "--url", target,
               "--check-batch", str(check_batch)]  # fmt: skip
    extra = None
    if broker is not None:
        command = [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", "worker", "--pool", "threads",
                   "--concurrency", "4", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                   "--without-heartbeat"]  # fmt: skip
        extra = {"TARRY_TEST_CELERY_BROKER": broker, "TARRY_TEST_CELERY_DB": target, "TARRY_TEST_CELERY_LEASE": "60",
                 "TARRY_TEST_CELERY_QUEUE": f"tarry-bench-{uuid.uuid4().hex[:6]}"}  # fmt: skip
    log = markers.with_suffix(".log")  # the workers' warnings and errors
    started = [start(command, markers, extra, log=log) for _ in range(workers)]
    try:
        time.sleep(4.0)  # imports, connections, and the seeded tasks' first round, all due at once
        pids = backends(base, application) if base else []
        began, worker_cpu, db_cpu = time.time(), sum(map(cpu_seconds, (w.pid for w in started))), 0.0
        db_cpu = sum(map(cpu_seconds, pids))
        time.sleep(seconds)
        ended = time.time()
        worker_cpu = sum(cpu_seconds(w.pid) for w in started) - worker_cpu
        later = backends(base, application) if base else []
        db_cpu = sum(map(cpu_seconds, later)) - db_cpu  # a backend opened meanwhile counts whole
    finally:
        for worker in started:
            worker.send_signal(signal.SIGTERM)
        for worker in started:
            worker.wait()
    checks: dict[str, list[float]] = {}
    for line in markers.read_text().splitlines() if markers.exists() else []:  # none when no check came
        kind, order, at = line.split()
        if kind == "build-check":
            checks.setdefault(order, []).append(float(at))
    gaps = sorted(
        b - a - 1.0 for times in checks.values() for a, b in itertools.pairwise(sorted(times)) if began <= b <= ended
    )
    counted = sum(1 for times in checks.values() for at in times if began <= at <= ended)
    return {
        "tasks": tasks,
        "workers": workers,
        "celery": broker is not None,
        "batch": check_batch,
        "per_second": counted / (ended - began),
        "late_p50": statistics.median(gaps) if gaps else float("nan"),
        "late_p99": gaps[max(0, int(len(gaps) * 0.99) - 1)] if gaps else float("nan"),
        "worker_ms": worker_cpu * 1000 / max(counted, 1),
        "db_ms": db_cpu * 1000 / max(counted, 1) if base else float("nan"),
        "double": sum(1 for times in checks.values() for a, b in itertools.pairwise(sorted(times)) if b - a < 0.5),
    }


async def sweep(
    label: str, make_url: Callable[[], str], base: str | None, sizes: list[int], folder: Path, seconds: float
) -> list[dict[str, Any]]:
    """For each size, seed the tasks once, then run the old path (a full step each) and the batched path on them,
    one after the other (interleaved, on a machine whose load changes), and two batched workers."""
    found = []
    for tasks in sizes:
        url = make_url()
        await fresh(url)
        await seed_tasks(url, tasks)
        for batch, workers in ((0, 1), (256, 1), (256, 2)):
            markers = folder / f"markers-sweep-{label}-{tasks}-{batch}-{workers}"
            figures = await on_time(url, markers, tasks, seconds, batch, base, workers)
            print(label, figures, flush=True)
            found.append({"database": label, **figures})
    return found


async def celery_sweep(base: str, broker: str, sizes: list[int], folder: Path, seconds: float) -> list[dict[str, Any]]:
    """For each size, on PostgreSQL, one Celery worker process and one embedded worker (batches both) on the same
    seeded tasks, one after the other."""
    found = []
    for tasks in sizes:
        url = postgres_schema(base)
        await fresh(url)
        await seed_tasks(url, tasks)
        for broker_or_none in (broker, None):
            kind = "celery" if broker_or_none else "embedded"
            markers = folder / f"markers-celery-sweep-{tasks}-{kind}"
            figures = await on_time(url, markers, tasks, seconds, 256, base, 1, broker_or_none)
            print("PostgreSQL", figures, flush=True)
            found.append({"database": "PostgreSQL", **figures})
    return found


def _row(load: dict[str, Any], seconds: float) -> str:
    path = "full step each" if load["batch"] == 0 else f"batches of {load['batch']}"
    worker = f"{load['workers']} Celery" if load.get("celery") else f"{load['workers']} embedded"
    db = "" if load["db_ms"] != load["db_ms"] else f"{load['db_ms']:.2f}"
    # No task checked twice within the run: later than the run is long.
    late = [f"{load[key] * 1000:.0f} ms" if load[key] == load[key] else f"> {seconds:.0f} s" for key in LATE]
    return (
        f"| {load['database']} | {load['tasks']} | {worker} | {path} | {load['per_second']:.0f} "
        f"| {late[0]} | {late[1]} | {load['worker_ms']:.2f} | {db} |"
    )


def _table_head() -> list[str]:
    return [
        f"Measured on {datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}), on a machine shared with other jobs (load average {os.getloadavg()[0]:.1f} "
        "as it ended): compare the rows of one size, measured one after the other on the same tasks.",
        "",
        "| database | tasks | workers | checked | checks/s | lateness p50 | lateness p99 | worker CPU ms/check "
        "| PostgreSQL CPU ms/check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]


def celery_lines(loads: list[dict[str, Any]], seconds: float) -> list[str]:
    return [
        CELERY_TITLE,
        "",
        *_table_head(),
        *(_row(load, seconds) for load in loads),
        "",
        "As above, with one Celery worker process (`--pool threads --concurrency 4`, RabbitMQ, the app of",
        "`tests/jobs/celery_app.py`, lease 60 s) beside one embedded worker on the same tasks. Its worker CPU is the",
        "Celery process's (the broker's own is not counted). Each Celery worker looks for due chats and sends",
        "`tarry.check_tasks`, which checks them in a batch (`tarry.jobs.celery.register`, `check_batch`).",
        "",
    ]


def replace_section(text: str, title: str, lines: list[str], ends: tuple[str, ...]) -> str:
    """``text`` with the section that starts at ``title`` (up to the first of ``ends`` after it) made ``lines``; a
    section not there yet goes before the first of ``ends``."""
    before, found, rest = text.partition(title)
    if not found:
        at = min((text.find(end) for end in ends if end in text), default=len(text))
        before, rest = text[:at], text[at:]
    else:
        rest = rest[min((rest.find(end) for end in ends if end in rest), default=len(rest)) :]
    return before + "\n".join(lines) + "\n" + rest


def sweep_lines(loads: list[dict[str, Any]], seconds: float) -> list[str]:
    return [
        SWEEP_TITLE,
        "",
        *_table_head(),
        *(_row(load, seconds) for load in loads),
        "",
        f"Each task asks to be checked every second (`poll_interval` 1 s); the figures cover {seconds:.0f} s after a",
        "4 s warm-up. Lateness is how much later than a second a task was checked again. Worker CPU is the worker",
        "processes' user and system time (on SQLite the database's work is in it); PostgreSQL CPU is that of the",
        "workers' backends. A full step each is the worker with `check_batch=0` (concurrency 16); batches are the",
        "default: a chat that only waits on working tasks is checked without a full step (`tarry.jobs.checks`).",
        "Issue 38's goal: one worker keeps at least 2,000 tasks on PostgreSQL (1,000 on SQLite) checked with a p99",
        "lateness of 250 ms at most, for about 1 ms of CPU per check, worker and database together.",
        "",
    ]


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
    parser.add_argument("--sizes", default="500,1000,2000,3000", help="numbers of working tasks, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds each lateness run measures")
    parser.add_argument("--sweep-only", action="store_true", help="only the lateness sweep; keep the other figures")
    parser.add_argument("--celery-only", action="store_true", help="only the Celery sweep; keep the other figures")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    out = Path(arguments.out)
    sizes = [int(size) for size in arguments.sizes.split(",")]
    if arguments.celery_only:
        assert arguments.postgres and arguments.broker, "the Celery sweep needs --postgres and --broker"
        found = await celery_sweep(arguments.postgres, arguments.broker, sizes, folder, arguments.seconds)
        lines = celery_lines(found, arguments.seconds)
        out.write_text(replace_section(out.read_text(), CELERY_TITLE, lines, (NOTIFY_MARKER,)))
        return
    loads = await run_sweep(arguments, folder)
    if arguments.sweep_only:
        lines = sweep_lines(loads, arguments.seconds)
        out.write_text(replace_section(out.read_text(), SWEEP_TITLE, lines, (CELERY_TITLE, NOTIFY_MARKER)))
        return
    await everything(arguments, folder, loads, out)


async def run_sweep(arguments: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    """The lateness sweep on SQLite, and on PostgreSQL when given."""
    sizes = [int(size) for size in arguments.sizes.split(",")]
    files = itertools.count()
    loads = await sweep(
        "SQLite", lambda: f"sqlite:///{folder / f'sweep-{next(files)}.db'}", None, sizes, folder, arguments.seconds
    )
    if arguments.postgres:
        base = arguments.postgres
        loads += await sweep("PostgreSQL", lambda: postgres_schema(base), base, sizes, folder, arguments.seconds)
    return loads


async def everything(arguments: argparse.Namespace, folder: Path, loads: list[dict[str, Any]], out: Path) -> None:
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
        *sweep_lines(loads, arguments.seconds),
    ]
    if arguments.postgres and arguments.broker:
        sizes = [int(size) for size in arguments.sizes.split(",")]
        found = await celery_sweep(arguments.postgres, arguments.broker, sizes, folder, arguments.seconds)
        lines += celery_lines(found, arguments.seconds)
    kept = out.read_text().partition(NOTIFY_MARKER) if out.exists() else ("", "", "")
    # bench/notify_bench.py's section stays as that bench wrote it.
    out.write_text("\n".join(lines) + ("\n\n" + kept[1] + kept[2] if kept[1] else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
