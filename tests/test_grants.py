"""``tarry.grants``: which calls a standing grant matches, and the values it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tarry.grants import Allow, Equal, Grant, Within, constraints_of, expiry_of, same_json
from tarry.messages import ToolCall
from tarry.principals import Principal

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def grant(**fields: object) -> Grant:
    values: dict[str, object] = {"id": "g", "tool": "pay", "granted_by": Principal("ada"), "granted_at": NOW}
    return Grant(**(values | fields))  # type: ignore[arg-type]


def pay(**arguments: object) -> ToolCall:
    return ToolCall("c", "pay", arguments)


def test_a_grant_matches_its_tool_in_its_scope_while_live() -> None:
    everywhere, one_chat, one_agent = grant(), grant(chat_id="chat-1"), grant(agent="payer")
    assert everywhere.matches(pay(), "chat-9", None, NOW)
    assert not everywhere.matches(ToolCall("c", "refund", {}), "chat-9", None, NOW)
    assert one_chat.matches(pay(), "chat-1", None, NOW) and not one_chat.matches(pay(), "chat-2", None, NOW)
    assert one_agent.matches(pay(), "chat-2", "payer", NOW) and not one_agent.matches(pay(), "chat-2", None, NOW)
    ending = grant(expires_at=NOW + timedelta(hours=1))
    assert ending.matches(pay(), "c", None, NOW + timedelta(minutes=59))
    assert not ending.matches(pay(), "c", None, NOW + timedelta(hours=1))
    assert not grant(revoked_at=NOW, revoked_by=Principal("bob")).matches(pay(), "c", None, NOW)
    assert (everywhere.scope, one_chat.scope, one_agent.scope) == ("everywhere", "chat chat-1", "agent payer")


def test_constraints_compare_as_json() -> None:
    bounded = grant(
        constraints=constraints_of(equal={"to": "Bob", "tags": [1, {"a": True}]}, within={"amount": (0, 10)})
    )
    assert bounded.matches(pay(to="Bob", tags=[1.0, {"a": True}], amount=10), "c", None, NOW)
    for arguments in (
        {"to": "Bob", "tags": [1, {"a": True}], "amount": 10.5},  # above the bounds
        {"to": "Bob", "tags": [1, {"a": 1}], "amount": 5},  # true is no number
        {"to": "Bob", "tags": [1, {"a": True}], "amount": True},  # nor a bound's number
        {"to": "Bob", "tags": [1, {"a": True}], "amount": "5"},  # text is no number
        {"to": "Eve", "tags": [1, {"a": True}], "amount": 5},
        {"tags": [1, {"a": True}], "amount": 5},  # missing
    ):
        assert not bounded.matches(pay(**arguments), "c", None, NOW), arguments
    assert same_json(1, 1.0) and not same_json(1, True) and not same_json("1", 1) and not same_json([1], [1, 2])
    assert Within("n", min=3).admits({"n": 1e9}) and not Within("n", max=3).admits({"n": 4})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Within("amount", 10, 1), "reversed: min 10 > max 1"),
        (lambda: Within("amount"), "need a min, a max or both"),
        (lambda: Within("amount", float("nan"), 1), "must be a finite number"),
        (lambda: Equal("", 1), "names an argument"),
        (lambda: Equal("x", object()), "must be a JSON value"),
        (lambda: constraints_of(equal={"x": 1}, within={"x": (0, 1)}), "given twice: x"),
        (lambda: constraints_of(within={"x": 5}), r"a \(min, max\) pair"),
        (lambda: grant(tool=""), "names a tool"),
        (lambda: grant(chat_id="c", agent="a"), "not both"),
        (lambda: Allow("galaxy"), "one of chat, agent, everywhere"),
        (lambda: Allow(ttl=-1), "positive number of seconds"),
        (lambda: expiry_of(NOW, 5, NOW), "ttl or expires_at, not both"),
        (lambda: expiry_of(NOW, None, NOW), "in the past"),
        (lambda: expiry_of(NOW, None, datetime(2031, 1, 1)), "aware datetime"),
    ],
)
def test_bad_values_are_refused_naming_what_was_wrong(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_a_grant_as_data() -> None:
    made = grant(constraints=(Equal("to", "Bob"), Within("amount", max=5)), chat_id="chat-1")
    data = made.to_dict()
    assert data["constraints"] == [{"name": "to", "equal": "Bob"}, {"name": "amount", "min": None, "max": 5}]
    assert (data["scope"], data["granted_by"], data["granted_at"]) == (
        "chat chat-1",
        {"id": "ada", "name": None},
        NOW.isoformat(),
    )
