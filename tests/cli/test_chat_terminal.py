"""``tarry chat`` in a real terminal (a pty driven by pexpect), with a scripted agent from the working directory."""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tarry.cli.exits import Exit
from tarry.store import Store
from tests.cli.conftest import HERE, tarry, tarry_command, user_environment

TIMEOUT = 180
"""Seconds to wait for expected output: generous, so a busy 2-core machine passes (each wait ends on its text)."""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder holding the agent module ``errands.py``, as a user's project would."""
    shutil.copy(HERE / "chat_agent.py", tmp_path / "errands.py")
    return tmp_path


class Terminal:
    """One ``tarry`` process in a pseudo-terminal."""

    def __init__(self, arguments: list[str], cwd: Path) -> None:
        self.process = pexpect.spawn(
            tarry_command(),
            arguments,
            cwd=str(cwd),
            env=user_environment(),
            encoding="utf-8",
            timeout=TIMEOUT,
            dimensions=(50, 220),
        )

    def expect(self, text: str) -> None:
        """Wait until ``text`` appears in the output."""
        self.process.expect_exact(text)

    def say(self, line: str) -> None:
        """Type ``line`` and Enter."""
        self.process.sendline(line)

    def finish(self) -> int:
        """End the input (Ctrl-D) and return the exit status."""
        self.process.sendeof()
        return self.wait()

    def wait(self) -> int:
        """Wait for the process to end; its exit status."""
        self.process.expect(pexpect.EOF)
        self.process.close()
        assert self.process.exitstatus is not None
        return self.process.exitstatus


@pytest.fixture
def chat(workdir: Path) -> Iterator[Terminal]:
    """``tarry chat --agent errands:agent`` on the default SQLite file of the working directory."""
    terminal = Terminal(["chat", "--agent", "errands:agent"], workdir)
    terminal.expect("Ctrl-C parks it")
    yield terminal
    if terminal.process.isalive():
        terminal.process.terminate(force=True)


def test_replies_and_an_approved_call(chat: Terminal, workdir: Path) -> None:
    chat.say("hello")
    chat.expect("You said: hello")
    chat.say("pay Bob please")
    chat.expect("call transfer_money(amount=20, to='Bob')")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    chat.say("y")
    chat.expect("approved")
    chat.expect("transfer_money ->")
    chat.expect("Done: Sent 20 EUR to Bob.")
    assert chat.finish() == Exit.OK
    assert (workdir / "tarry.db").exists()


def test_a_failed_model_request_is_reported_and_the_chat_goes_on(chat: Terminal) -> None:
    chat.say("an outage")
    chat.expect("The model request failed: the provider is down")
    chat.say("hello")
    chat.expect("You said: hello")
    assert chat.finish() == Exit.OK


def test_a_form_asks_each_field_again_until_it_is_valid(chat: Terminal) -> None:
    chat.say("book a table")
    chat.expect("When should I book Luigi's?")
    chat.expect("Time (one of 19:00, 20:00, 21:00)>")
    chat.say("25:00")
    chat.expect("'25:00' is not one of the choices ('19:00', '20:00', '21:00')")
    chat.expect("Time (one of 19:00, 20:00, 21:00)>")
    chat.say("20:00")
    chat.expect("People (integer; 1..12; default 2)>")
    chat.say("40")
    chat.expect("must be at most 12, got 40")
    chat.expect("People (integer; 1..12; default 2)>")
    chat.say("4")
    chat.expect("Done: Booked Luigi's at 20:00 for 4.")
    assert chat.finish() == Exit.OK


def test_a_declined_call_tells_the_model_the_note(chat: Terminal) -> None:
    chat.say("pay Bob")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    chat.say("maybe")
    chat.expect("Type y, n, or n: followed by a note, or r: followed by the result.")
    chat.say("n: not this month")
    chat.expect("declined (note: not this month)")
    chat.expect('"note": "not this month"')  # the scripted model repeats the result it was sent
    assert chat.finish() == Exit.OK


def test_r_gives_the_result_instead_and_the_tool_never_runs(chat: Terminal) -> None:
    chat.say("pay Bob")
    chat.expect("r: RESULT = give the result instead> ")
    chat.say("r:")
    chat.expect("or r: followed by the result.")
    chat.say("r: Bob was paid in cash: 20 EUR")
    chat.expect("gave the result in the tool's place; the tool does not run")
    # The scripted model repeats the result it was sent: the person's, not the tool's "Sent 20 EUR to Bob."
    chat.expect('"given_by": "a person"')
    chat.expect('"result": "Bob was paid in cash: 20 EUR"')
    assert chat.finish() == Exit.OK


def test_y_with_changes_approves_the_call_as_changed_and_a_bad_change_is_named(chat: Terminal) -> None:
    chat.say("pay Bob")
    chat.expect("y: NAME=VALUE ... = yes, with those arguments changed, r: RESULT = give the result instead> ")
    chat.say("y: amount")
    chat.expect("y: takes NAME=VALUE, got 'amount'")
    chat.say("pay Bob")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    chat.say("y: amount=5")
    chat.expect("approved")
    chat.expect('from {"amount": 20, "to": "Bob"} to {"amount": 5, "to": "Bob"}')  # the model is told of the change
    chat.expect("Sent 5 EUR to Bob.")  # the tool ran, with the person's amount
    assert chat.finish() == Exit.OK


def test_a_task_shows_its_progress_on_a_status_line(chat: Terminal) -> None:
    chat.say("render the holiday video")
    chat.expect("call render_video(name='holiday')")
    chat.expect("is working: queued")
    chat.expect("is working: rendering, 50% done")
    chat.expect("Done: holiday.mp4 is ready.")
    assert chat.finish() == Exit.OK


def test_a_url_question_shows_the_host_in_punycode_and_opens_nothing(chat: Terminal) -> None:
    chat.say("login please")
    chat.expect("Sign in to go on")
    chat.expect("https://xn--bcher-kva.example/login?next=/home")
    chat.expect("tarry opens nothing")
    chat.say("y")
    chat.expect("Done: Signed in to bücher.example.")
    assert chat.finish() == Exit.OK


def test_ctrl_c_parks_the_chat_and_resume_carries_it_on(chat: Terminal, workdir: Path) -> None:
    chat.say("pay Bob")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    chat.expect("r: RESULT = give the result instead> ")  # the prompt is up: the chat is parked and reading
    chat.process.sendintr()
    chat.process.expect(r"Parked chat ([0-9a-f-]{36})\. Resume it with:\s+(tarry chat --resume [^\r\n]+)")
    chat_id, command = chat.process.match.group(1), chat.process.match.group(2)
    assert chat.wait() == Exit.INTERRUPTED
    assert command == f"tarry chat --resume {chat_id} --agent errands:agent"
    pending = tarry("pending", "--json", cwd=workdir)
    assert [question["chat_id"] for question in json.loads(pending.stdout)] == [chat_id]

    resumed = Terminal(shlex.split(command)[1:], workdir)
    resumed.expect("you> pay Bob")  # the transcript so far
    resumed.expect("Approve transfer_money(amount=20, to='Bob')?")
    resumed.say("y")
    resumed.expect("Done: Sent 20 EUR to Bob.")
    assert resumed.finish() == Exit.OK


def test_a_question_answered_from_another_process_is_picked_up(chat: Terminal, workdir: Path) -> None:
    chat.say("pay Bob")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    (question,) = json.loads(tarry("pending", "--json", cwd=workdir).stdout)
    approved = tarry("approve", question["id"], cwd=workdir)
    assert approved.returncode == Exit.OK, approved.stderr
    chat.expect("Decided elsewhere meanwhile: approved")
    chat.expect("Done: Sent 20 EUR to Bob.")
    assert chat.finish() == Exit.OK


def test_without_a_terminal_the_output_is_plain_text(workdir: Path) -> None:
    done = subprocess.run(
        [tarry_command(), "chat", "--agent", "errands:agent", "--url", f"sqlite:///{workdir / 'plain.db'}"],
        cwd=workdir,
        input="render it\nbook\n21:00\n3\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=user_environment(),
        check=False,
    )
    assert done.returncode == Exit.OK, done.stderr
    assert "\x1b" not in done.stdout
    lines = done.stdout.splitlines()
    assert "  ... render_video(name='holiday') is working: queued" in lines
    assert "  ... render_video(name='holiday') is working: rendering, 50% done" in lines
    assert "model> Done: Booked Luigi's at 21:00 for 3." in lines
    assert re.search(r"Carry it on with: tarry chat --resume [0-9a-f-]{36} --url sqlite:///", done.stdout)


def test_a_chat_needs_a_model_or_an_agent(workdir: Path) -> None:
    done = tarry("chat", cwd=workdir, stdin="")
    assert done.returncode == Exit.USAGE
    assert "a new chat needs --model PROVIDER:MODEL or --agent MODULE:NAME" in done.stderr
    assert not (workdir / "tarry.db").exists()


async def test_cancel_from_another_shell_closes_the_waiting_calls(chat: Terminal, workdir: Path) -> None:
    chat.say("pay Bob")
    chat.expect("Approve transfer_money(amount=20, to='Bob')?")
    (question,) = json.loads((await asyncio.to_thread(tarry, "pending", "--json", cwd=workdir)).stdout)
    cancelled = await asyncio.to_thread(tarry, "cancel", question["chat_id"], cwd=workdir)
    assert cancelled.returncode == Exit.OK, cancelled.stderr
    chat.expect("Decided elsewhere meanwhile: the chat's cancellation was asked for")
    chat.expect("The transfer_money call was cancelled.")
    chat.expect("The chat was cancelled from elsewhere")
    chat.say("hello again")
    chat.expect("You said: hello again")
    assert chat.finish() == Exit.OK


def everything_command() -> str:
    """server-everything as .ci/run installs it (skips, saying how to install it, when it is missing)."""
    found = HERE.parents[1] / ".ci" / "node" / "node_modules" / ".bin" / "mcp-server-everything"
    if not found.exists():
        pytest.skip("run `npm install --prefix .ci/node @modelcontextprotocol/server-everything`")
    return f"{found} stdio"


def test_an_mcp_servers_form_is_asked_field_by_field_while_its_call_runs(workdir: Path) -> None:
    chat = Terminal(["chat", "--agent", "errands:agent", "--mcp", everything_command()], workdir)
    try:
        chat.expect("you> ")
        chat.say("everything, please")
        chat.expect("call trigger-elicitation-request()")
        chat.expect("Please provide inputs for the following fields:")
        for prompt, typed, problem in [
            ("String (string)> ", "hello from the terminal", None),
            ("Boolean (boolean; optional)> ", "perhaps", "expected true or false, got 'perhaps'"),
            ("Boolean (boolean; optional)> ", "yes", None),
            ("String with default (string; default It was a dark and stormy night.)> ", "", None),
            ("String with email format (string; email; optional)> ", "not-an-email", "is not a valid email"),
            ("String with email format (string; email; optional)> ", "me@example.org", None),
            ("String with uri format (string; uri; optional)> ", "", None),
            ("String with date format (string; date; optional)> ", "", None),
            ("Integer (integer; 1..100; default 42)> ", "500", "must be at most 100, got 500"),
            ("Integer (integer; 1..100; default 42)> ", "7", None),
            ("Number in range 1-1000 (number; 0..1000; default 3.14)> ", "", None),
            ("one of Monica, Rachel, Joey, Chandler, Ross, Phoebe; default Monica)> ", "Janice", "not one of"),
            ("one of Monica, Rachel, Joey, Chandler, Ross, Phoebe; default Monica)> ", "Joey", None),
            (
                "any of Guitar, Piano, Violin, Drums, Bass; comma-separated; 1..3 choices; default Guitar)> ",
                "Piano, Drums",
                None,
            ),
            ("one of hero-1 = Superman, hero-2 = Green Lantern, hero-3 = Wonder Woman; default hero-1)> ", "", None),
            ("(any of fish-1 = Tuna, fish-2 = Salmon, fish-3 = Trout;", "", None),
            ("(one of pet-1 = Cats, pet-2 = Dogs,", "", None),
        ]:
            chat.expect(prompt)
            chat.say(typed)
            if problem is not None:
                chat.expect(problem)
        chat.expect("answered")
        for value in ('"integer": 7', '"untitledSingleSelectEnum": "Joey"', '"Piano"', '"Drums"', "me@example.org"):
            chat.expect(value)
        chat.expect("you> ")
        assert chat.finish() == Exit.OK
    finally:
        if chat.process.isalive():
            chat.process.terminate(force=True)


@pytest.mark.parametrize(("typed", "decision"), [("n", "decline"), ("y", "accept")])
def test_tarry_mcp_serves_approval_is_asked_and_only_the_persons_yes_runs_the_tool(
    workdir: Path, typed: str, decision: str
) -> None:
    """tarry's own server asks its approval as a form with no fields: it is still asked, never taken as answered."""
    shutil.copy(HERE / "remote_errands.py", workdir / "remote_errands.py")
    served = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--stdio", "--tools", "remote_errands:TOOLS"]
    served += ["--url", f"sqlite:///{workdir / 'served.db'}"]
    chat = Terminal(["chat", "--agent", "errands:agent", "--mcp", shlex.join(served)], workdir)
    try:
        chat.expect("you> ")
        chat.say("refund order A-17")
        chat.expect("call refund(order='A-17')")
        chat.expect("Approve the refund call?")
        chat.expect("y = yes, n = no")
        assert not (workdir / "refunds.log").exists()  # nothing runs before the person's answer
        chat.say(typed)
        if decision == "accept":
            chat.expect("accepted")
            chat.expect("Done: Refunded A-17.")
        else:
            chat.expect("declined")
            chat.expect("Done: ")
        chat.expect("you> ")
        assert chat.finish() == Exit.OK
    finally:
        if chat.process.isalive():
            chat.process.terminate(force=True)
    runs = (workdir / "refunds.log").read_text().splitlines() if (workdir / "refunds.log").exists() else []
    assert runs == (["A-17"] if decision == "accept" else [])
    trail = json.loads(tarry("history", "--json", cwd=workdir).stdout)
    assert [(event["decision"], event["channel"], event["by"]["id"]) for event in trail] == [
        (decision, "cli", getpass.getuser())
    ]
    served_trail = json.loads(tarry("history", "--json", "--url", f"sqlite:///{workdir / 'served.db'}").stdout)
    assert [(event["decision"], event["channel"]) for event in served_trail] == [(decision, "mcp")]


def test_y_is_for_the_arguments_the_prompt_showed(chat: Terminal, workdir: Path) -> None:
    chat.say("share 20 with Bob")
    chat.expect("Approve shared_transfer(amount=20, to='Bob')?")
    chat.expect("r: RESULT = give the result instead> ")

    async def changed_elsewhere() -> None:  # another person approves it with the amount changed, meanwhile
        async with Store(f"sqlite:///{workdir / 'tarry.db'}") as store:
            [question] = await store.pending_questions()
            assert await store.approve(question.id, arguments={"amount": 5}, by="bob")

    asyncio.run(changed_elsewhere())
    chat.say("y")
    chat.expect('changed since you saw them: it now proposes {"amount": 5, "to": "Bob"}')
    chat.expect("as a person changed it: amount=5 (was 20)")
    chat.expect("r: RESULT = give the result instead> ")
    chat.say("y")  # for what it shows now: the second approval of 5
    chat.expect("Done: A person changed the arguments of this shared_transfer call before approving it")
    chat.expect("It ran with the changed arguments.")
    chat.expect("Sent 5 EUR to Bob.")
    chat.expect("you> ")
    assert chat.finish() == Exit.OK
