"""Task: statuses, data, poll interval, predicates, to_dict/load round trips, refresh and cancel."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tarry import Task, TaskStatus, Tool, ToolCall


def test_defaults() -> None:
    task = Task()
    assert task.status == "working"
    assert task.status_message is None
    assert task.poll_interval is None
    assert task.data == {}
    assert task.tool_call is None
    assert task.to_dict() == {"task": {"status": "working"}}


def test_the_five_statuses() -> None:
    assert Task.STATUSES == ("working", "input_required", "completed", "failed", "cancelled")
    assert [status.value for status in TaskStatus] == list(Task.STATUSES)


@pytest.mark.parametrize("status", list(TaskStatus))
def test_status_accepts_the_enum_and_its_text(status: TaskStatus) -> None:
    assert Task(status).status == status.value
    assert Task(status.value).status == status.value
    assert Task(status).to_dict()["task"]["status"] == status.value


@pytest.mark.parametrize("status", ["done", "WORKING", "", None, 3, "input-required"])
def test_any_other_status_is_a_value_error_naming_it(status: Any) -> None:
    with pytest.raises(ValueError, match="Unknown task status") as raised:
        Task(status)
    assert repr(status) in str(raised.value)


@pytest.mark.parametrize(
    ("status", "done", "completed", "failed", "cancelled", "input_required"),
    [
        ("working", False, False, False, False, False),
        ("input_required", False, False, False, False, True),
        ("completed", True, True, False, False, False),
        ("failed", True, False, True, False, False),
        ("cancelled", True, False, False, True, False),
    ],
)
def test_predicates_are_methods(
    status: str, done: bool, completed: bool, failed: bool, cancelled: bool, input_required: bool
) -> None:
    task = Task(status)
    assert (task.done(), task.completed(), task.failed(), task.cancelled(), task.input_required()) == (
        done,
        completed,
        failed,
        cancelled,
        input_required,
    )


def test_data_is_deep_copied_with_str_keys() -> None:
    inner = {"ids": [1, 2]}
    source: dict[Any, Any] = {"job": inner, 7: "seven", "nested": {1: {2: "deep"}}, "pair": (1, 2)}
    task = Task(data=source)
    assert task.data == {"job": {"ids": [1, 2]}, "7": "seven", "nested": {"1": {"2": "deep"}}, "pair": [1, 2]}
    inner["ids"].append(3)
    source["job"] = "changed"
    assert task.data["job"] == {"ids": [1, 2]}


def test_to_dict_is_a_copy() -> None:
    task = Task(data={"list": [1]})
    task.to_dict()["task"]["data"]["list"].append(2)
    assert task.data == {"list": [1]}


@pytest.mark.parametrize("data", [{"when": object()}, {"set": {1, 2}}, {"nan": math.nan}, {"x": b"bytes"}])
def test_data_that_cannot_be_json_is_a_type_error(data: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="JSON"):
        Task(data=data)


@pytest.mark.parametrize("data", [[1, 2], "text", 3, ("a", 1)])
def test_data_must_be_a_dict(data: Any) -> None:
    with pytest.raises(TypeError, match="data must be a dict"):
        Task(data=data)


def test_poll_interval_is_seconds_as_float() -> None:
    assert Task(poll_interval=2).poll_interval == 2.0
    assert isinstance(Task(poll_interval=2).poll_interval, float)
    assert Task(poll_interval=0.25).poll_interval == 0.25


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), ("5", TypeError), (True, TypeError)])
def test_bad_poll_interval(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="poll_interval"):
        Task(poll_interval=value)


def test_status_message_must_be_text() -> None:
    with pytest.raises(TypeError, match="status_message"):
        Task(status_message=42)  # type: ignore[arg-type]


def test_to_dict_leaves_out_none_and_empty_data() -> None:
    assert Task("failed", status_message="disk full").to_dict() == {
        "task": {"status": "failed", "status_message": "disk full"}
    }
    full = Task("working", status_message="half way", poll_interval=1.5, data={"id": "r1"})
    assert full.to_dict() == {
        "task": {"status": "working", "status_message": "half way", "poll_interval": 1.5, "data": {"id": "r1"}}
    }


def test_load_is_the_inverse_and_keeps_the_tool_call() -> None:
    call = ToolCall("call_1", "job", {"n": 1})
    task = Task("input_required", status_message="waiting", poll_interval=3, data={"a": [1, {"b": None}]})
    loaded = Task.load(task.to_dict(), tool_call=call)
    assert loaded == task
    assert loaded.tool_call is call
    assert Task.load(task.to_dict()).tool_call is None


@pytest.mark.parametrize("state", [{}, {"task": "working"}, {"task": {}}, [], None])
def test_load_rejects_what_to_dict_never_made(state: Any) -> None:
    with pytest.raises(ValueError, match="Task state"):
        Task.load(state)


def test_load_still_checks_the_status() -> None:
    with pytest.raises(ValueError, match="Unknown task status"):
        Task.load({"task": {"status": "paused"}})


def test_base_refresh_and_cancel_do_nothing_and_return_the_task() -> None:
    task = Task(data={"x": 1})
    assert task.refresh() is task
    assert task.cancel() is task
    assert task.to_dict() == {"task": {"status": "working", "data": {"x": 1}}}


def test_tasks_compare_by_class_and_state() -> None:
    class Other(Task):
        pass

    assert Task(data={"a": 1}) == Task(data={"a": 1})
    assert Task(data={"a": 1}) != Task(data={"a": 2})
    assert Task() != Other()


def test_a_tool_rebuilds_its_own_task_class() -> None:
    class Render(Task):
        pass

    class RenderTool(Tool):
        """Renders a video."""

        task_class = Render

        def execute(self, name: str) -> Task:
            return Render(data={"name": name})

    class PlainTool(Tool):
        """Does something."""

        def execute(self) -> str:
            return "ok"

    state = Render("working", data={"name": "intro"}).to_dict()
    rebuilt = RenderTool().load_task(state)
    assert type(rebuilt) is Render
    assert rebuilt.data == {"name": "intro"}
    assert type(PlainTool().load_task(state)) is Task


# Property tests

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
task_data = st.none() | st.dictionaries(st.text(max_size=8), json_values, max_size=5)
poll_intervals = st.none() | st.integers(min_value=0, max_value=10**6) | st.floats(min_value=0, max_value=1e9)


@given(
    status=st.sampled_from(list(TaskStatus)) | st.sampled_from(Task.STATUSES),
    status_message=st.none() | st.text(),
    poll_interval=poll_intervals,
    data=task_data,
)
def test_round_trips_are_exact(
    status: str, status_message: str | None, poll_interval: float | None, data: dict[str, Any] | None
) -> None:
    task = Task(status, status_message=status_message, poll_interval=poll_interval, data=data)
    state = task.to_dict()
    # The state is plain JSON: it survives being written out and read back.
    assert json.loads(json.dumps(state)) == state
    loaded = Task.load(json.loads(json.dumps(state)))
    assert loaded == task
    assert loaded.to_dict() == state
    assert (loaded.status, loaded.status_message, loaded.poll_interval, loaded.data) == (
        task.status,
        task.status_message,
        task.poll_interval,
        task.data,
    )
    assert loaded.data == (data or {})
    assert set(state["task"]) == {"status"} | {
        key
        for key, value in (("status_message", status_message), ("poll_interval", poll_interval), ("data", data))
        if value is not None and value != {}
    }


@given(st.text().filter(lambda text: text not in Task.STATUSES))
def test_random_statuses_are_rejected(status: str) -> None:
    with pytest.raises(ValueError, match="Unknown task status"):
        Task(status)
