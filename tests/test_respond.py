"""Answering in the tool's place on an in-memory chat: the result a person gives closes the call, the tool never runs,
and only a call's approval takes a result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tarry import Chat, Question, Task, Tool
from tarry.errors import InvalidAnswerError, NotRespondableError, QuestionExpiredError
from tarry.testing import ScriptedModel, advance_clock


class Deploy(Tool):
    """Deploys a service; each run appends a line to a file."""

    requires_approval = True
    approval_ttl = 60

    def __init__(self, runs: Path) -> None:
        self.runs = runs

    def execute(self, service: str) -> str:
        with self.runs.open("a") as runs:
            runs.write(f"{service}\n")
        return f"Deployed {service}"


class Review(Tool):
    """Asks a person to sign off on a change (an approval-kind question of its task), after it ran."""

    def execute(self, change: str) -> Task:
        return Task().with_question(Question("", "approval", f"Sign off {change}?"))

    def resume(self, task: Task, change: str) -> str:
        return f"{change} signed off"


def runs_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def deploying(tmp_path: Path, *also: Tool) -> tuple[Chat, ScriptedModel, Path]:
    runs = tmp_path / "runs"
    model = ScriptedModel([[{"name": "deploy", "arguments": {"service": "web"}}], "Noted."])
    return Chat(model=model, tools=[Deploy(runs), *also]), model, runs


def test_the_result_a_person_gives_reaches_the_model_as_theirs_and_the_tool_never_runs(tmp_path: Path) -> None:
    chat, model, runs = deploying(tmp_path)
    chat.ask_sync("Deploy web")
    [approval] = chat.pending_questions_sync()
    assert chat.respond_sync(approval.id, "web is already at 2.1", by="ann") is True
    approval = chat.question_sync(approval)  # a value: the chat holds the decided one
    assert approval.to_dict()["decision"] == "respond"
    assert approval.to_dict()["answer"] == {"result": "web is already at 2.1"}
    assert chat.respond_sync(approval, "again") is False
    assert chat.decline_sync(approval) is False
    reply = chat.complete_sync()
    assert reply is not None and reply.content == "Noted."
    assert runs_of(runs) == []
    sent = model.requests[-1].messages[-1]
    assert sent.role == "tool"
    assert json.loads(sent.content) == {
        "given_by": "a person",
        "message": "A person gave this result in place of running the deploy tool; the tool did not run.",
        "result": "web is already at 2.1",
    }


def test_a_result_is_any_json_value_and_nothing_else(tmp_path: Path) -> None:
    chat, _model, runs = deploying(tmp_path)
    chat.ask_sync("Deploy web")
    [approval] = chat.pending_questions_sync()
    with pytest.raises(InvalidAnswerError, match="JSON value"):
        chat.respond_sync(approval, object())
    with pytest.raises(InvalidAnswerError, match="lone surrogate"):
        chat.respond_sync(approval, ["\ud800"])
    assert approval.decision is None
    assert chat.respond_sync(approval, ({"version": 2.1}, None)) is True
    assert chat.question_sync(approval).answer == {"result": [{"version": 2.1}, None]}
    chat.complete_sync()
    assert json.loads(chat.messages[-2].content)["result"] == [{"version": 2.1}, None]
    assert runs_of(runs) == []


def test_a_lapsed_approval_takes_no_result(tmp_path: Path) -> None:
    chat, _model, runs = deploying(tmp_path)
    chat.ask_sync("Deploy web")
    [approval] = chat.pending_questions_sync()
    advance_clock(61)
    with pytest.raises(QuestionExpiredError):
        chat.respond_sync(approval, "done")
    assert approval.decision is None and runs_of(runs) == []


def test_only_the_approval_a_call_waits_on_before_it_runs_takes_a_result(tmp_path: Path) -> None:
    model = ScriptedModel([[{"name": "review", "arguments": {"change": "#7"}}], "Done."])
    chat = Chat(model=model, tools=[Review()])
    chat.ask_sync("Review #7")
    [sign_off] = chat.pending_questions_sync()
    assert sign_off.kind == "approval"
    with pytest.raises(NotRespondableError, match="asked by the task of the review call, which has run already"):
        chat.respond_sync(sign_off, "signed")
    assert sign_off.decision is None
    assert chat.approve_sync(sign_off) is True
    assert chat.complete_sync() is not None and chat.messages[-2].content == "#7 signed off"
