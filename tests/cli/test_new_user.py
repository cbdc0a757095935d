"""What a new user stumbled on at the command line: each case as a real ``tarry`` process shows it.

Every test that reads a database runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pexpect
import pytest

from tarry import Agent
from tarry.approvals import Approval
from tarry.cli.exits import Exit
from tarry.store import Store
from tests.cli.chat_agent import TransferMoney, agent
from tests.cli.conftest import HERE, tarry, tarry_command, user_environment


class BigTransfer(TransferMoney):
    """A transfer two people must approve."""

    name = "transfer_money"
    requires_approval = Approval(count=2)


async def test_show_prints_a_chat_whose_tool_choice_names_a_tool(store: Store, database_url: str) -> None:
    chat = await store.create_chat(agent=agent, tool_choice="transfer_money")
    await chat.ask("pay Bob")
    shown = await asyncio.to_thread(tarry, "show", chat.id, "--url", database_url)
    assert shown.returncode == Exit.OK, shown.stderr
    assert "call transfer_money(amount=20, to='Bob')" in shown.stdout
    assert "instructions: You run errands." in shown.stdout
    as_json = json.loads((await asyncio.to_thread(tarry, "show", chat.id, "--json", "--url", database_url)).stdout)
    assert as_json["instructions"] == "You run errands."


async def test_an_agent_gives_its_chats_a_tool_choice_and_settings(store: Store) -> None:
    forcing = Agent(
        "forcing", model=agent.model, tools=agent.tools, tool_choice="transfer_money", settings={"temperature": 0}
    )
    stored = await store.create_chat(agent=forcing, settings={"top_p": 0.5})
    loaded = await store.load_chat(stored.id, tools=agent.tools)
    assert (loaded.tool_choice, loaded.settings) == ("transfer_money", {"temperature": 0, "top_p": 0.5})
    assert forcing.chat().tool_choice == "transfer_money"
    with pytest.raises(ValueError, match="tool_choice must be"):
        Agent("wrong", tools=agent.tools, tool_choice="no_such_tool")


def test_tarry_chat_sets_a_tool_choice_and_model_settings(tmp_path: Path) -> None:
    shutil.copy(HERE / "chat_agent.py", tmp_path / "errands.py")
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    started = tarry(
        "chat", "--agent", "errands:agent", "--url", url, "--tool-choice", "auto",
        "--setting", "temperature=0.2", "--setting", "stop=[\"END\"]", "--setting", "user=ada",
        cwd=tmp_path, stdin="hello\n",
    )  # fmt: skip
    assert started.returncode == Exit.OK, started.stderr
    chat_id = started.stdout.split("Chat ")[-1].split()[0]

    async def stored() -> tuple[object, object]:
        async with Store(url) as store:
            chat = await store.load_chat(chat_id, tools=agent.tools)
            return chat.tool_choice, chat.settings

    assert asyncio.run(stored()) == ("auto", {"temperature": 0.2, "stop": ["END"], "user": "ada"})
    refused = tarry("chat", "--agent", "errands:agent", "--url", url, "--setting", "oops", cwd=tmp_path, stdin="")
    assert refused.returncode == Exit.FAILED and "--setting takes NAME=VALUE, got 'oops'" in refused.stderr


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["mcp", "serve", "--tools", "nowhere:tools"], "--tools nowhere:tools: no module named 'nowhere'"),
        (["mcp", "serve", "--tools", "errands:nothing"], "--tools errands:nothing: the module 'errands' has no"),
        (["mcp", "serve", "--tools", "errands"], "--tools looks like 'package.module:name', got 'errands'"),
        (["worker", "--agents", "nowhere:agent"], "--agents nowhere:agent: no module named 'nowhere'"),
        (["worker", "--agents", "errands:TransferMoney"], "--agents errands:TransferMoney holds"),
    ],
)
def test_a_bad_module_spec_is_one_line(tmp_path: Path, command: list[str], said: str) -> None:
    shutil.copy(HERE / "chat_agent.py", tmp_path / "errands.py")
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert tarry("db", "upgrade", "--url", url).returncode == Exit.OK
    done = tarry(*command, "--url", url, cwd=tmp_path)
    assert done.returncode == Exit.USAGE, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


async def test_ids_may_be_given_by_a_unique_prefix(store: Store, database_url: str) -> None:
    chats = [await store.create_chat(agent=agent) for _ in range(40)]
    for chat in chats:
        await chat.ask("pay Bob")
    waiting = [question for chat in chats for question in await chat.pending_questions()]
    first = waiting[0]
    done = await asyncio.to_thread(tarry, "approve", first.id[:8], "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    assert (await store.question(first.id)).decision == "accept"
    shown = await asyncio.to_thread(tarry, "show", chats[0].id[:8], "--url", database_url)
    assert shown.returncode == Exit.OK and f"Chat {chats[0].id}" in shown.stdout
    # 40 questions: two of them share their first character (there are only 16)
    by_first: dict[str, list[str]] = {}
    for question in waiting:
        by_first.setdefault(question.id[0], []).append(question.id)
    shared, ids = next((start, ids) for start, ids in by_first.items() if len(ids) > 1)
    ambiguous = await asyncio.to_thread(tarry, "decline", shared, "--url", database_url)
    assert ambiguous.returncode == Exit.UNKNOWN
    assert f"Several questions have an id starting with {shared!r}" in ambiguous.stderr
    assert all(question_id in ambiguous.stderr for question_id in sorted(ids)[:4])
    unknown = await asyncio.to_thread(tarry, "approve", "zz", "--url", database_url)
    assert unknown.returncode == Exit.UNKNOWN and "No question has an id starting with 'zz'" in unknown.stderr


async def test_history_lines_show_the_answer_and_the_note(store: Store, database_url: str) -> None:
    booking = await store.create_chat(agent=agent)
    await booking.ask("book a table")
    payment = await store.create_chat(agent=agent)
    await payment.ask("pay Bob")
    [form] = await booking.pending_questions()
    [approval] = await payment.pending_questions()
    await store.answer(form.id, {"time": "20:00", "party": 4}, by="ada")
    await store.decline(approval.id, "not this month", by="ada")
    listed = await asyncio.to_thread(tarry, "history", "--url", database_url)
    assert listed.returncode == Exit.OK, listed.stderr
    assert "accept decided: time='20:00', party=4" in listed.stdout
    assert "decline decided, note 'not this month'" in listed.stdout


async def test_an_answered_task_says_it_waits_for_a_process(store: Store, database_url: str) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("book a table")
    [form] = await chat.pending_questions()
    await store.answer(form.id, {"time": "20:00"})
    listed = await asyncio.to_thread(tarry, "tasks", "--url", database_url)
    assert "input_required" not in listed.stdout
    assert "answered; waits for a process to carry it on" in listed.stdout


async def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    for command in (["pending"], ["show", "x"], ["worker", "--agents", "tests.cli.chat_agent:agent"]):
        done = await asyncio.to_thread(tarry, *command, "--url", f"sqlite:///{missing}")
        assert done.returncode == Exit.DATABASE, done.stderr
        assert f"no database file at {missing}" in done.stderr
        assert not missing.exists()


def test_server_commands_exit_7_on_a_database_they_cannot_use(tmp_path: Path) -> None:
    url = "postgresql://postgres@127.0.0.1:1/none"  # nothing listens on port 1
    for command in (["worker", "--agents", "tests.cli.chat_agent:agent"], ["db", "upgrade"], ["serve"]):
        done = tarry(*command, "--url", url, cwd=Path.cwd())
        assert done.returncode == Exit.DATABASE, (command, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_two_person_approval_in_tarry_chat_waits_for_the_second_person(tmp_path: Path) -> None:
    module = (HERE / "chat_agent.py").read_text()
    module += (
        "\n\nclass BigTransfer(TransferMoney):\n    name = 'transfer_money'\n"
        "    requires_approval = __import__('tarry').approvals.Approval(count=2)\n\n"
        "agent = Agent('cli-test', model=agent.model, tools=[BigTransfer()], instructions='You run errands.')\n"
    )
    (tmp_path / "errands.py").write_text(module)
    chat = pexpect.spawn(
        tarry_command(), ["chat", "--agent", "errands:agent"], cwd=str(tmp_path), env=user_environment(),
        encoding="utf-8", timeout=60, dimensions=(50, 220),
    )  # fmt: skip
    try:
        chat.expect_exact("Ctrl-C parks it")
        chat.sendline("pay Bob")
        chat.expect_exact("Approve transfer_money(amount=20, to='Bob')?")
        chat.sendline("y")
        chat.expect_exact("Your approval was counted: 1 of 2")
        chat.expect_exact("waiting for others to decide: transfer_money(amount=20, to='Bob') (1 of 2 approvals)")
        url = f"sqlite:///{tmp_path / 'tarry.db'}"

        async def second_person() -> None:
            async with Store(url) as store:
                [question] = await store.pending_questions()
                assert await store.approve(question.id, by="bob")

        asyncio.run(second_person())
        chat.expect_exact("Done: Sent 20 EUR to Bob.")
        chat.sendeof()
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == Exit.OK
    assert os.path.exists(tmp_path / "tarry.db")


def test_resume_prints_the_header_before_the_transcript(tmp_path: Path) -> None:
    shutil.copy(HERE / "chat_agent.py", tmp_path / "errands.py")
    first = tarry("chat", "--agent", "errands:agent", cwd=tmp_path, stdin="hello\n")
    chat_id = first.stdout.split("Chat ")[-1].split()[0]
    again = tarry("chat", "--resume", chat_id, "--agent", "errands:agent", cwd=tmp_path, stdin="")
    assert again.returncode == Exit.OK, again.stderr
    assert again.stdout.index(f"Chat {chat_id} in ") < again.stdout.index("you> hello")


async def test_answering_a_form_someone_answered_already_is_too_late_whatever_it_says(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("book a table")
    [form] = await chat.pending_questions()
    await store.answer(form.id, {"time": "20:00"}, by="ada")
    for late in (["answer", form.id], ["answer", form.id, "--field", "time=25:00"], ["approve", form.id]):
        done = await asyncio.to_thread(tarry, *late, "--url", database_url)
        assert done.returncode == Exit.TOO_LATE, (late, done.stderr)  # not 5: the answer no longer matters
        assert "already decided by ada via code" in done.stderr
    assert (await store.question(form.id)).answer == {"time": "20:00", "party": 2}
    assert [event.outcome for event in await store.history(question_id=form.id)] == ["decided", "lost", "lost", "lost"]


def test_an_empty_name_to_decide_as_is_refused(tmp_path: Path) -> None:
    done = tarry("approve", "some-id", "--as", " ", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert done.returncode == Exit.USAGE and "a name to decide as cannot be empty" in done.stderr
    assert not (tmp_path / "x.db").exists()
