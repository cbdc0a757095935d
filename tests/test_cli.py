"""``tarry demo`` as a user runs it: a real process, its output and its exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tarry import cli, demo


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


def test_tarry_demo_runs_the_story_and_exits_0() -> None:
    finished = run_tarry("demo")
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr == ""
    output = finished.stdout
    lines = output.splitlines()
    # The three calls of the model's turn.
    for call in ("transfer_money(amount=20, to='Bob')", 'book_table(restaurant="Luigi\'s")', "render_video("):
        assert call in output
    # What waits after the first turn: an approval, a question with its fields, a task.
    assert "? approval: transfer_money(amount=20, to='Bob')" in output
    assert "When should I book Luigi's?" in output
    assert any("time (one of 19:00, 20:00, 21:00)" in line for line in lines)
    assert "... task: render_video is working: queued" in output
    # What was answered.
    assert "+ approved transfer_money(amount=20, to='Bob')" in output
    assert '+ answered "When should I book Luigi\'s?" with time=20:00, party=4' in output
    # The first complete() runs what it can; the task needs one more.
    assert "-> transfer_money: Sent 20 EUR to Bob." in output
    assert "-> book_table: Booked Luigi's at 20:00 for 4." in output
    assert "... task: render_video is working: rendering, 50% done" in output
    # The second finishes the task, and the model replies.
    assert "-> render_video: holiday.mp4 is ready." in output
    assert "The model replies: All done:" in output
    assert lines[-1] == "Nothing waits any more."
    # The steps come in the order of the story.
    steps = [line for line in lines if line.startswith("[")]
    assert [step[:3] for step in steps] == ["[1]", "[2]", "[3]", "[4]"]
    assert output.index("? approval") < output.index("+ approved") < output.index("-> transfer_money")
    assert output.index("rendering, 50% done") < output.index("holiday.mp4 is ready")


def test_tarry_without_a_command_prints_help_and_fails() -> None:
    finished = run_tarry()
    assert finished.returncode == 2
    assert "demo" in finished.stdout


def test_an_unknown_command_is_refused_naming_it() -> None:
    finished = run_tarry("dance")
    assert finished.returncode == 2
    assert "dance" in finished.stderr


def test_main_runs_the_demo_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    assert "Nothing waits any more." in capsys.readouterr().out


async def test_the_narration_can_go_anywhere() -> None:
    lines: list[str] = []
    chat = await demo.run(lines.append)
    assert chat.waiting is False
    assert lines[-1] == "Nothing waits any more."
    assert any("holiday.mp4 is ready." in line for line in lines)
    tool_messages = [message for message in chat.messages if message.role == "tool"]
    assert len(tool_messages) == 3
