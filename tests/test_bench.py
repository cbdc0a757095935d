"""bench/report.py runs end to end with tiny counts (``--quick``) and writes its page; no timing is asserted."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_report_runs_every_part_with_tiny_counts(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    postgres = os.environ.get("TARRY_TEST_POSTGRES_URL", "")
    done = subprocess.run(
        [sys.executable, "bench/report.py", "--quick", "--out", str(page), "--postgres", postgres],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    for heading in (
        "## The goals of issues 14 and 38, in this run",
        "## Latency per chat, beside the peers",
        "## Every library at `synchronous=FULL` (SQLite file)",
        "## What one commit costs on this machine",
        "## What one statement costs on this machine",
        "## Bytes written per step as the chat grows (SQLite file)",
        "## `pending_questions()` at scale, whole and in pages of 50",
        "## A million chats (PostgreSQL)",
        "## Answers per second (PostgreSQL, 2 processes)",
    ):
        assert heading in text
    assert '| SQLite file | tarry, `durability="full"` (the default) |' in text
    times = r"\| [\d.]+ ms \| [\d.]+ ms \| [\d.]+ ms \| [\d.]+ ms \|"  # syncs alone, CPU, p50, p99
    full = rf"\| 2 \| (\d+) {times} (\d+) {times}"
    chat_decides = re.search(r"\| tarry, the chat decides \(`complete\(approve=\)`\) " + full, text)
    elsewhere = re.search(r"\| tarry, decided elsewhere \(`store.approve`, `load_chat`, `complete\(\)`\) " + full, text)
    assert chat_decides and elsewhere, "the synchronous=FULL rows of tarry, with synchronous read back as 2"
    assert (chat_decides.groups(), elsewhere.groups()) == (("2", "3"), ("2", "4"))  # commits, from the WALs
    assert re.search(r"\| Python's `sqlite3` alone: one commit of one row " + full, text)
    assert re.search(r"\| SQLite file \| \d+ µs \| \d+ µs \| \d+ µs \| \d+ µs \|", text)
    if postgres:
        assert '| PostgreSQL | tarry, `durability="full"` (the default) |' in text
        assert all(f"| {at_a_time} | 10 |" in text for at_a_time in (1, 4, 16))  # 2 processes × 5 questions
        floor = r"\| the floor: psycopg alone, 1 \| 10 \| [\d.]+ \| \*\*[\d,]+\*\* \| 100% \| [\d.]+ ms \|"
        assert re.search(floor, text)
        best = r"\| [\d,]+ with (1|4|16) at a time in each \([\d,]+ with 1; [\d,]+ with 4; [\d,]+ with 16; "
        assert re.search(best + r"the floor, psycopg alone one at a time: [\d,]+\) \| (yes|no) \|", text)
        assert '| PostgreSQL | yes (`durability="full"`) |' in text
        assert re.search(r"\| PostgreSQL \| \d+ µs \| \d+ µs \| \d+ µs \| \d+ µs \|", text)
    if importlib.util.find_spec("matplotlib") is not None:
        assert (page.parent / "img" / "latency.png").stat().st_size > 0
        assert (page.parent / "img" / "bytes-per-step.png").stat().st_size > 0


def test_the_pruning_benchmark_runs_with_tiny_counts(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks-pruning.md"
    postgres = os.environ.get("TARRY_TEST_POSTGRES_URL", "")
    options = ["--chats", "40", "--baseline", "10", "--waiting", "1", "--sqlite-chats", "5", "--out", str(page)]
    done = subprocess.run(
        [sys.executable, "bench/prune_bench.py", *options, *(["--postgres", postgres] if postgres else [])],
        cwd=ROOT,
        env={**os.environ, "TARRY_TEST_POSTGRES_URL": postgres},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "## Bytes per chat (SQLite)" in text and "| after the prune |" in text
    if postgres:
        assert "## Decision latency while a prune runs (PostgreSQL)" in text
        assert "Removed 41 chat(s)" in text  # the copies and the chat they were copied from
        assert re.search(r"\| while the prune runs \| \d+ \| [\d.]+ ms \| [\d.]+ ms \|", text)


def test_the_bridge_benchmark_runs_with_tiny_counts(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks-bridges.md"
    postgres = os.environ.get("TARRY_TEST_POSTGRES_URL", "")
    done = subprocess.run(
        [sys.executable, "bench/bridge_bench.py", "--rounds", "3", "--out", str(page), "--postgres", postgres],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    for library in ("pydantic-ai", "OpenAI Agents SDK", "LangGraph"):
        bridged = rf"\| SQLite file \| {library} through the bridge \| [\d.]+ ms \| [\d.]+ ms \| [+-][\d.]+ ms \|"
        assert re.search(bridged, text)
        if postgres:
            assert re.search(rf"\| PostgreSQL \| {library} alone \| [\d.]+ ms \| [\d.]+ ms \|  \|", text)


def test_the_notifications_benchmark_runs_with_tiny_counts_and_keeps_the_page_before_its_section(
    tmp_path: Path,
) -> None:
    page = tmp_path / "benchmarks-jobs.md"
    page.write_text("# Background work: benchmarks\n\nThe jobs bench's figures.\n")
    postgres = os.environ.get("TARRY_TEST_POSTGRES_URL", "")
    options = ["--count", "3", "--deliveries", "20", "--out", str(page), "--postgres", postgres]
    for _ in range(2):  # a second run replaces its section, and keeps what came before
        done = subprocess.run(
            [sys.executable, "bench/notify_bench.py", *options],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.startswith("# Background work: benchmarks\n\nThe jobs bench's figures.\n")
    assert text.count("## Notifications: a question committed to its webhook received (3 questions") == 1
    assert re.search(r"\| embedded worker, SQLite \| \d+ ms \| \d+ ms \|", text)
    assert re.search(r"\| SQLite \| 20 \| [\d,]+ \| [\d,]+ \|", text)
    if postgres:
        assert re.search(r"\| PostgreSQL \| 20 \| [\d,]+ \| [\d,]+ \|", text)
