"""Notifications: from a question committed to its webhook received, and deliveries per second by one worker.

Run from the repository root: ``python bench/notify_bench.py [--postgres URL] [--count N] [--deliveries N]``. The
receiver is a process of its own on 127.0.0.1 (uvicorn) that verifies each signature; it
records when each webhook arrived. The latency is measured with the embedded worker (``Worker(..., notifier=...)``,
on a store of its own) delivering while this process asks one question at a time; the throughput with one notifier
sending deliveries made beforehand. The figures replace this bench's section of docs/benchmarks-jobs.md (after the
marker ``MARKER``; bench/jobs_bench.py keeps it when it writes the page).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from store_bench import Transfer, percentile

from tarry.jobs import Worker
from tarry.jobs.notifier import Notifier
from tarry.jobs.webhook import WebhookSender
from tarry.store import Store
from tarry.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- bench/notify_bench.py: the section below is its own -->"
SECRET = "whsec_" + "bm90aWZ5LWJlbmNoLXNlY3JldC0zMi1ieXRlcyEh"


def receive(folder: str) -> None:
    """The receiver process (uvicorn, a bare ASGI app): verify each webhook and append ``id question arrived_at`` to
    FOLDER/received."""
    import socket

    import uvicorn
    from standardwebhooks import Webhook

    verifier = Webhook(SECRET)
    received = (Path(folder) / "received").open("a", buffering=1)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        payload = verifier.verify(body, headers)
        received.write(f"{headers['webhook-id']} {payload['data']['id']} {time.time()}\n")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    (Path(folder) / "port.tmp").write_text(str(listening.getsockname()[1]))
    (Path(folder) / "port.tmp").rename(Path(folder) / "port")
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=512, lifespan="off")
    uvicorn.Server(config).run(sockets=[listening])


def start_receiver(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen([sys.executable, __file__, "--receive", str(folder)], cwd=ROOT)
    while not (folder / "port").exists():
        time.sleep(0.01)
    return process, f"http://127.0.0.1:{(folder / 'port').read_text()}/hook"


def arrivals(folder: Path) -> dict[str, float]:
    """When the first webhook of each question arrived (the ``asked`` one)."""
    path = folder / "received"
    found: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                found.setdefault(parts[1], float(parts[2]))
    return found


def transfers(count: int) -> ScriptedModel:
    """A model that asks ``count`` transfers at once, then is done."""

    def turn(history: list[Any]) -> Any:
        if history[-1].role == "user":
            return [{"name": "transfer", "arguments": {"amount": 5, "to": f"P{n}"}} for n in range(count)]
        return "Done."

    return ScriptedModel([turn] * 10)


async def latency(url: str, count: int) -> dict[str, float]:
    """Question committed (``chat.ask`` returned) to its webhook received, one at a time, with the embedded worker."""
    with tempfile.TemporaryDirectory() as folder:
        receiver, hook = start_receiver(Path(folder))
        try:
            async with Store(url) as asking, Store(url) as working:
                await asking.setup()
                sender = WebhookSender(hook, SECRET)
                worker = Worker(working, [_agent()], notifier=Notifier(working, [sender]))
                running = asyncio.create_task(worker.run())
                await asyncio.sleep(0.5)  # the worker's first look
                took = await one_at_a_time(asking, Path(folder), count)
                worker.stop()
                await running
                await sender.aclose()
        finally:
            receiver.kill()
            receiver.wait()
    return {"p50": statistics.median(took), "p99": percentile(took, 0.99)}


async def one_at_a_time(asking: Store, folder: Path, count: int) -> list[float]:
    """Milliseconds from each of ``count`` questions committed to its webhook received, asked one at a time."""
    took = []
    for _ in range(count):
        chat = await asking.create_chat(transfers(1), [Transfer()])
        await chat.ask("Pay.")
        committed = time.time()
        (question,) = await chat.pending_questions()
        deadline = time.monotonic() + 120
        while question.id not in (got := arrivals(folder)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"question {question.id}'s webhook never arrived")
            await asyncio.sleep(0.002)
        took.append((got[question.id] - committed) * 1000)
    return took


async def celery_latency(url: str, broker: str, count: int, *, watch: bool) -> dict[str, float]:
    """As [latency][], with a Celery worker process (2 threads, beat in it) delivering the notices: with ``watch``,
    sent the delivery task by its watch of the outbox; without, by beat alone (every second)."""
    with tempfile.TemporaryDirectory() as folder:
        receiver, hook = start_receiver(Path(folder))
        async with Store(url) as asking:
            await asking.setup()
            worker = start_celery(Path(folder), broker, url, hook, watch=watch)
            try:
                await one_at_a_time(asking, Path(folder), 1)  # the worker is up and has delivered once
                took = await one_at_a_time(asking, Path(folder), count)
            finally:
                worker.terminate()
                worker.wait(timeout=60)
                receiver.kill()
                receiver.wait()
    return {"p50": statistics.median(took), "p99": percentile(took, 0.99)}


def start_celery(folder: Path, broker: str, url: str, hook: str, *, watch: bool) -> subprocess.Popen[bytes]:
    """A Celery worker of ``bench/notify_celery_app.py`` with beat in it, on a queue of its own."""
    env = {**os.environ, "BENCH_BROKER": broker, "BENCH_DB": url, "BENCH_WEBHOOK": hook,
           "BENCH_QUEUE": f"tarry-notify-bench-{uuid.uuid4().hex[:8]}", "BENCH_WATCH": "1" if watch else "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    command = [sys.executable, "-m", "celery", "--quiet", "-A", "notify_celery_app", "worker", "-B",
               "--pool", "threads", "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip",
               "--without-mingle", "--without-heartbeat", "-s", str(folder / "beat-schedule")]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT / "bench", env=env)


def _agent() -> Any:
    from tarry import Agent

    return Agent(name="bench-notify", model=transfers(1), tools=[Transfer()])


class Discard:
    """A sender to an endpoint that sends nothing: what the notifier's own work (its database side) costs."""

    channel = "webhook"
    endpoint = True

    async def send(self, delivery: Any) -> None:
        """Nothing."""


async def throughput(url: str, deliveries: int, *, discard: bool = False) -> dict[str, float]:
    """Deliveries per second of one notifier sending ``deliveries`` webhooks made beforehand (10 per chat); with
    ``discard``, through a sender that sends nothing."""
    with tempfile.TemporaryDirectory() as folder:
        receiver, hook = start_receiver(Path(folder))
        try:
            async with Store(url, durability="fast") as store:
                await store.setup()
                for _ in range(deliveries // 10):
                    chat = await store.create_chat(transfers(10), [Transfer()])
                    await chat.ask("Pay.")
                sender = WebhookSender(hook, SECRET)
                notifier = Notifier(store, [Discard() if discard else sender], batch=500)
                started = time.perf_counter()
                while notifier.sent < deliveries and await notifier.deliver():
                    pass
                elapsed = time.perf_counter() - started
                await sender.aclose()
                assert (notifier.sent, notifier.failed_attempts) == (deliveries, 0), notifier.failed_attempts
        finally:
            receiver.kill()
            receiver.wait()
    return {"deliveries": deliveries, "seconds": elapsed, "per_second": deliveries / elapsed}


def fresh_postgres(url: str) -> tuple[str, str]:
    import psycopg

    schema = f"tarry_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{url}?options=-csearch_path%3D{schema}", schema


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def measure(postgres: str | None, count: int, deliveries: int, brokers: dict[str, str]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        figures["latency SQLite"] = await latency(f"sqlite:///{folder}/latency.db", count)
        figures["throughput SQLite"] = await throughput(f"sqlite:///{folder}/throughput.db", deliveries)
        figures["discarded SQLite"] = await throughput(f"sqlite:///{folder}/discard.db", deliveries, discard=True)
    if postgres:
        works = (
            ("latency", partial_latency(count)),
            ("throughput", partial_throughput(deliveries)),
            ("discarded", partial_throughput(deliveries, discard=True)),
        )
        for name, work in works:
            url, schema = fresh_postgres(postgres)
            try:
                figures[f"{name} PostgreSQL"] = await work(url)
            finally:
                drop_schema(postgres, schema)
        for broker_name, broker in brokers.items():
            for watch in (True, False):
                url, schema = fresh_postgres(postgres)
                try:
                    figures[f"celery {broker_name} {'watch' if watch else 'beat'}"] = await celery_latency(
                        url, broker, count, watch=watch
                    )
                finally:
                    drop_schema(postgres, schema)
    return figures


def partial_latency(count: int) -> Any:
    return lambda url: latency(url, count)


def partial_throughput(deliveries: int, *, discard: bool = False) -> Any:
    return lambda url: throughput(url, deliveries, discard=discard)


def section(figures: dict[str, Any], count: int) -> list[str]:
    lines = [
        MARKER,
        "",
        f"## Notifications: a question committed to its webhook received ({count} questions, one at a time)",
        "",
        f"Measured by `bench/notify_bench.py` on {datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load average {os.getloadavg()[0]:.1f} as it",
        "ended).",
        "",
        *loaded(),
        "| worker | p50 | p99 |",
        "|---|---|---|",
    ]
    for database in ("SQLite", "PostgreSQL"):
        if f"latency {database}" in figures:
            found = figures[f"latency {database}"]
            lines.append(f"| embedded worker, {database} | {found['p50']:.0f} ms | {found['p99']:.0f} ms |")
    for broker in ("RabbitMQ", "Redis"):
        for how, said in (("watch", "watching the outbox (the default)"), ("beat", "beat alone, every second")):
            if (found := figures.get(f"celery {broker} {how}")) is not None:
                row = f"| Celery on {broker}, {said}, PostgreSQL | {found['p50']:.0f} ms | {found['p99']:.0f} ms |"
                lines.append(row)
    lines += [
        "",
        "The notifier looks every 25 ms besides the store's wake-ups (a question recorded on PostgreSQL sends no",
        "`NOTIFY`; on SQLite any commit wakes it within 20 ms). The receiver verifies each signature.",
        "A Celery worker (a process of its own: `celery worker -B --pool threads --concurrency 2`) watches the",
        "outbox the same way (`register_notifier(..., watch=0.025)`) and sends `tarry.deliver_notices` through",
        "the broker as soon as a notice waits; a worker thread takes it and delivers. With `watch=None` only",
        "beat sends the task (`every=1.0`, Celery beat inside the worker): a notice waits for beat's next tick.",
        "",
        "## Notifications: webhooks delivered per second by one worker (to a receiver on 127.0.0.1)",
        "",
        "| database | deliveries | webhooks per second | the notifier alone, per second |",
        "|---|---|---|---|",
    ]
    for database in ("SQLite", "PostgreSQL"):
        if f"throughput {database}" in figures:
            found, alone = figures[f"throughput {database}"], figures[f"discarded {database}"]
            lines.append(
                f"| {database} | {found['deliveries']} | {found['per_second']:,.0f} | {alone['per_second']:,.0f} |"
            )
    lines += [
        "",
        "One `Notifier` (batches of 500, 16 sends at once, settled every 20 ms as they are sent) and one receiver",
        "process (uvicorn, a bare ASGI app that verifies each signature) share the machine's cores. The notifier",
        "alone sends through a sender that does nothing: its claims and settlements, without HTTP. The webhook",
        "sender spreads its requests over 8 small httpx pools of 2 connections: one pool of 64 sent about 740 a",
        "second here, since httpcore looks at every connection of a pool each time it places a request.",
        "",
    ]
    return lines


def loaded() -> list[str]:
    """A warning, when the machine was busy with other work while this ran (its load average above its cores)."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return []
    return [
        f"The machine was loaded by other work as this ran (load average {load:.1f} on {cores} cores): compare the",
        "rows of this run with each other; on a quiet machine every figure is lower (throughput higher).",
        "",
    ]


def write(out: Path, lines: list[str]) -> None:
    before = out.read_text().split(MARKER)[0].rstrip("\n") + "\n\n" if out.exists() else ""
    out.write_text(before + "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--receive", help=argparse.SUPPRESS)
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"))
    parser.add_argument("--rabbitmq", default=os.environ.get("TARRY_TEST_RABBITMQ_URL"))
    parser.add_argument("--redis", default=os.environ.get("TARRY_TEST_REDIS_URL"))
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-jobs.md"))
    arguments = parser.parse_args()
    if arguments.receive:
        receive(arguments.receive)
        return
    brokers = {name: url for name, url in (("RabbitMQ", arguments.rabbitmq), ("Redis", arguments.redis)) if url}
    figures = asyncio.run(measure(arguments.postgres, arguments.count, arguments.deliveries, brokers))
    print(json.dumps(figures, indent=2))
    write(Path(arguments.out), section(figures, arguments.count))


if __name__ == "__main__":
    main()
