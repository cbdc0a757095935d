"""``tarry demo`` as a user runs it: a real process, its output and its exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tarry import demo


def tarry_command() -> str:
    beside_python = Path(sys.executable).with_name("tarry")
    found = str(beside_python) if beside_python.exists() else shutil.which("tarry")
    assert found, "the tarry console script is not installed: run pip install -e ."
    return found


def run_tarry(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tarry_command(), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )


def test_tarry_demo_runs_the_story_across_three_processes_and_exits_0() -> None:
    finished = run_tarry("demo")
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr == ""
    output = finished.stdout
    lines = output.splitlines()
    steps = [line for line in lines if line.startswith("[")]
    assert steps == [
        "[1] Process 1 runs the chat until it parks",
        "[2] Process 2 lists what waits from the database and answers it",
        "[3] Process 3 carries the chat on to its final reply",
    ]
    first, second, third = output.split("\n[")[1:]
    # Process 1: the model's three calls, then what waits.
    for call in ("transfer_money(amount=20, to='Bob')", 'book_table(restaurant="Luigi\'s")', "render_video("):
        assert call in first
    assert "? approval: transfer_money(amount=20, to='Bob')" in first
    assert "When should I book Luigi's?" in first
    assert "time (one of 19:00, 20:00, 21:00)" in first
    assert "... task: render_video is working: queued" in first
    # Process 2: listed from the database alone, answered once; a second approval records nothing.
    assert "The database lists 2 question(s) across all chats." in second
    assert "+ approved transfer_money(amount=20, to='Bob')" in second
    assert '+ answered "When should I book Luigi\'s?" with time=20:00, party=4' in second
    assert "a second time records nothing (returned False)" in second
    # Process 3: the approved call runs, the answered one resumes, the task needs a second check.
    assert "-> transfer_money: Sent 20 EUR to Bob." in third
    assert "-> book_table: Booked Luigi's at 20:00 for 4." in third
    assert third.index("rendering, 50% done") < third.index("-> render_video: holiday.mp4 is ready.")
    assert "The model replies: All done:" in third
    assert lines[-1].strip() == "Nothing waits any more."


def test_tarry_demo_on_a_database_of_your_choosing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mine.db'}"
    finished = run_tarry("demo", "--url", url)
    assert finished.returncode == 0, finished.stderr
    assert (tmp_path / "mine.db").exists()
    assert f"Database: {url}" in finished.stdout


def test_tarry_without_a_command_prints_help_and_fails() -> None:
    finished = run_tarry()
    assert finished.returncode == 2
    assert "demo" in finished.stdout


def test_an_unknown_command_is_refused_naming_it() -> None:
    finished = run_tarry("dance")
    assert finished.returncode == 2
    assert "dance" in finished.stderr


def test_the_narration_can_go_anywhere(tmp_path: Path) -> None:
    lines: list[str] = []
    assert demo.run(f"sqlite:///{tmp_path / 'demo.db'}", lines.append) == 0
    assert lines[-1].strip() == "Nothing waits any more."
    assert any("holiday.mp4 is ready." in line for line in lines)


async def test_the_in_memory_chat_of_the_demo_runs_the_same_story() -> None:
    chat = demo.build_chat()
    await chat.ask(demo.USER_TEXT)
    for question in await chat.pending_questions():
        if question.kind == "approval":
            assert await chat.approve(question)
        else:
            assert await chat.answer(question, time="19:00")
    await chat.complete()
    reply = await chat.complete()
    assert reply is not None and reply.content.startswith("All done:")
    assert "Booked Luigi's at 19:00 for 2." in reply.content
