"""The tools the MCP conformance suite's server scenarios call, written as ordinary tarry tools.

``tarry mcp serve --tools tests.mcp.servers.conformance_tools:TOOLS``, with ``--task-required`` for each of
``TASK_REQUIRED`` and ``--ask-before-task`` for each of ``ASK_BEFORE_TASK``, serves them; each
scenario names the tool it calls and the shape it expects (``conformance list --server``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from tarry import Field, Task, Tool, tool
from tarry.mcp import ProtocolError
from tarry.tools import ask


def _keyed(task: Task, key: str) -> Task:
    """The task with its question asked under ``key`` (the scenarios expect named input requests)."""
    assert task.question is not None
    return task.with_question(replace(task.question, key=key))


@tool
def test_simple_text() -> str:
    """Returns simple text content."""
    return "This is a simple text response for testing."


@tool
def test_error_handling() -> str:
    """Always fails, so the result is an error."""
    raise RuntimeError("This tool intentionally returns an error for testing")


class TestElicitation(Tool):
    """Asks the user for a username and an email address."""

    name = "test_elicitation"

    def execute(self, message: str) -> Task:
        return self.ask(
            message,
            username=Field(description="User's response"),
            email=Field(description="User's email address"),
        )

    def resume(self, task: Task, message: str) -> str:
        return f"User response: action=accept, content={task.answer}"


class TestElicitationDefaults(Tool):
    """Asks for values of every primitive type, each with a default (SEP-1034)."""

    name = "test_elicitation_sep1034_defaults"

    def execute(self) -> Task:
        return self.ask(
            "Please review and update the form fields with defaults",
            name=Field(default="John Doe", required=False),
            age=Field("integer", default=30, required=False),
            score=Field("number", default=95.5, required=False),
            status=Field(choices=["active", "inactive", "pending"], default="active", required=False),
            verified=Field("boolean", default=True, required=False),
        )

    def resume(self, task: Task) -> str:
        return f"Elicitation completed: action=accept, content={task.answer}"


class TestElicitationEnums(Tool):
    """Asks for one value of each enum shape SEP-1330 names, the deprecated ``enumNames`` one too."""

    name = "test_elicitation_sep1330_enums"

    def execute(self) -> Task:
        options = ["option1", "option2", "option3"]
        titled = {"value1": "First", "value2": "Second", "value3": "Third"}
        return self.ask(
            "Please pick from each kind of list",
            untitledSingle=Field(choices=options),
            titledSingle=Field(choices=titled),
            legacyEnum=Field(choices={"opt1": "Option one", "opt2": "Option two"}, legacy_titles=True),
            untitledMulti=Field("array", choices=options),
            titledMulti=Field("array", choices=titled),
        )

    def resume(self, task: Task) -> str:
        return f"Elicitation completed: action=accept, content={task.answer}"


class InputRequiredElicitation(Tool):
    """Asks for the user's name as a 2026-07-28 input request keyed ``user_name``."""

    name = "test_input_required_result_elicitation"

    def execute(self) -> Task:
        return _keyed(self.ask("What is your name?", name=str), "user_name")

    def resume(self, task: Task) -> str:
        assert task.answer is not None
        return f"Hello, {task.answer['name']}!"


class InputRequiredMultiRound(Tool):
    """Asks for a name, then (a second round) for a favourite colour."""

    name = "test_input_required_result_multi_round"

    def execute(self) -> Task:
        return _keyed(self.ask("Step 1: What is your name?", name=str), "step1")

    def resume(self, task: Task) -> str | Task:
        assert task.answer is not None
        if "name" in task.answer:
            colour = _keyed(self.ask("Step 2: What is your favorite color?", color=str), "step2")
            colour.data = {"name": task.answer["name"]}
            return colour
        return f"{task.data['name']} likes {task.answer['color']}"


class InputRequiredState(Tool):
    """Asks for a confirmation; the retry proves the request state came back intact."""

    name = "test_input_required_result_request_state"

    def execute(self) -> Task:
        return _keyed(self.ask("Please confirm", ok=bool), "confirm")

    def resume(self, task: Task) -> str:
        return f"state-ok: confirmed={task.answer and task.answer['ok']}"


class InputRequiredTampered(InputRequiredState):
    """Like the request-state tool; the suite tampers with the state it echoes."""

    name = "test_input_required_result_tampered_state"


@tool
def greet(name: str) -> str:
    """Greets someone (finishes at once)."""
    return f"Hello, {name}!"


class SlowCompute(Tool):
    """Computes for ``seconds`` seconds (as a task the client polls); 0 answers at once."""

    name = "slow_compute"

    def execute(self, seconds: float, label: str = "") -> str | Task:
        if seconds <= 0:
            return "computed"
        return Task(status_message="computing", poll_interval=0.05, data={"until": time.time() + seconds})

    def resume(self, task: Task, seconds: float, label: str = "") -> str | Task:
        return "computed" if time.time() >= task.data["until"] else task


class FailingJob(Tool):
    """Fails after about a second, with a tool execution error (it runs only as a task: see TASK_REQUIRED)."""

    name = "failing_job"

    def execute(self) -> Task:
        return Task(status_message="working", poll_interval=0.05, data={"until": time.time() + 1})

    def resume(self, task: Task) -> Task:
        if time.time() < task.data["until"]:
            return task
        raise RuntimeError("the job failed")


class ProtocolErrorJob(Tool):
    """Fails after a moment with a JSON-RPC protocol error (its backend refused the request), as a task."""

    name = "protocol_error_job"

    def execute(self) -> Task:
        return Task(status_message="working", poll_interval=0.05, data={"until": time.time() + 0.2})

    def resume(self, task: Task) -> Task:
        if time.time() < task.data["until"]:
            return task
        raise ProtocolError(-32603, "The job's backend refused the request", {"backend": "jobs"})


class MultiInput(Tool):
    """Asks for a name and a confirmation at once: two questions, answered in any order."""

    name = "multi_input"

    def execute(self) -> Task:
        name = replace(ask("What is your name?", name=str), key="name")
        confirm = replace(ask("Go ahead?", confirm=bool), key="confirm")
        return Task(status="input_required").with_question(name, confirm)


class ToolWithTask(Tool):
    """Asks for the user's name in the call itself, then greets them as a task (SEP-2663 composition)."""

    name = "test_tool_with_task"

    def execute(self) -> Task:
        return _keyed(self.ask("What is your name?", name=str), "user_name")

    def resume(self, task: Task) -> str:
        assert task.answer is not None
        return f"Hello, {task.answer['name']}!"


class StreamingElicitation(InputRequiredElicitation):
    """Asks for the user's name (the answer comes in the call's retry, never as a request on the stream)."""

    name = "test_streaming_elicitation"


@tool
def test_logging_tool() -> str:
    """Writes a line to the server's own log; tarry sends no log messages to clients."""
    logging.getLogger("tests.conformance").info("test_logging_tool was called")
    return "logged on the server"


class ConfirmDelete(Tool):
    """Asks before deleting a file."""

    name = "confirm_delete"

    def execute(self, filename: str) -> Task:
        return self.ask(f"Delete {filename}?", confirm=bool)

    def resume(self, task: Task, filename: str) -> str:
        return f"deleted {filename}" if task.answer and task.answer["confirm"] else f"kept {filename}"


class ToolWithProgress(Tool):
    """Works in three steps; each step's status message goes out as a progress notification."""

    name = "test_tool_with_progress"

    def execute(self) -> Task:
        return Task(status_message="0/100", poll_interval=0.7, data={"step": 0})

    def resume(self, task: Task) -> str | Task:
        step = task.data["step"] + 1
        if step == 3:
            return "Progress test completed"
        return Task(status_message=f"{50 * step}/100", poll_interval=0.7, data={"step": step})


class TestReconnection(Tool):
    """Works for 4.5 seconds: longer than the conformance server holds a call's stream (3 s), so it resumes."""

    name = "test_reconnection"

    def execute(self) -> Task:
        return Task(status_message="working", poll_interval=0.1, data={"until": time.time() + 4.5})

    def resume(self, task: Task) -> str | Task:
        return "Reconnection test completed" if time.time() >= task.data["until"] else task


ADDRESS = {
    "$anchor": "addressDef",
    "type": "object",
    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
}


class JsonSchemaTool(Tool):
    """Tool with JSON Schema 2020-12 features."""

    name = "json_schema_2020_12_tool"

    @property
    def parameters(self) -> dict[str, Any]:
        """A hand-written 2020-12 schema (the suite checks that it is listed as written, keyword for keyword)."""
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": ADDRESS},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        }

    def execute(self, name: str = "") -> str:
        return f"contact {name}"


TOOLS: list[Any] = [
    JsonSchemaTool(),
    ToolWithProgress(),
    TestReconnection(),
    greet,
    SlowCompute(),
    FailingJob(),
    ProtocolErrorJob(),
    ConfirmDelete(),
    MultiInput(),
    ToolWithTask(),
    StreamingElicitation(),
    test_logging_tool,
    test_simple_text,
    test_error_handling,
    TestElicitation(),
    TestElicitationDefaults(),
    TestElicitationEnums(),
    InputRequiredElicitation(),
    InputRequiredMultiRound(),
    InputRequiredState(),
    InputRequiredTampered(),
]

TASK_REQUIRED = ["failing_job", "test_tool_with_task"]
"""The tools served only as tasks (``--task-required``)."""
ASK_BEFORE_TASK = ["test_tool_with_task"]
"""The tools that ask their questions in the call before becoming tasks (``--ask-before-task``)."""
