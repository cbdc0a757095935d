"""Question and Field: answer validation, coercion of form strings, and the JSON schema mapping."""

from __future__ import annotations

import dataclasses
import math
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tarry import Field, Question, Verdict
from tarry.errors import InvalidAnswerError, TarryError
from tarry.messages import ToolCall
from tarry.policies import Approval, Vote
from tarry.principals import Principal


def form(*fields: Field, **named: Field) -> Question:
    items = list(fields) + [field.named(name) for name, field in named.items()]
    return Question(id="q1", kind="form", message="Please answer", fields=tuple(items))


def rejects(question: Question, *names: str, **values: Any) -> InvalidAnswerError:
    with pytest.raises(InvalidAnswerError) as raised:
        question.check_answer(values=values)
    assert set(raised.value.errors) == set(names)
    for name in names:
        assert f"{name}:" in str(raised.value)
    return raised.value


def test_a_question_is_open_until_it_is_decided_or_its_time_runs_out() -> None:
    asked = datetime(2026, 1, 1, tzinfo=UTC)
    lasting = Question(id="q1", kind="approval", message="Go?", expires_at=asked + timedelta(minutes=5))
    assert lasting.is_open(asked) and lasting.is_open(asked + timedelta(minutes=4, seconds=59))
    assert not lasting.is_open(asked + timedelta(minutes=5)) and lasting.expired(asked + timedelta(minutes=5))
    forever = Question(id="q2", kind="approval", message="Go?")
    assert forever.is_open(asked + timedelta(days=3650))
    forever = forever.decided_with(Verdict("accept", asked))
    assert not forever.is_open(asked) and not forever.expired(asked + timedelta(days=3650))


def test_invalid_answer_error_is_a_value_error_and_a_tarry_error() -> None:
    assert issubclass(InvalidAnswerError, ValueError)
    assert issubclass(InvalidAnswerError, TarryError)


def test_extra_values_are_dropped_and_defaults_filled() -> None:
    question = form(
        name=Field(), size=Field("integer", default=2), extra=Field(required=False), tags=Field(required=False)
    )
    assert question.check_answer(values={"name": "Ada", "unasked": 1, "other": "x"}) == {"name": "Ada", "size": 2}


def test_empty_form_values_count_as_missing() -> None:
    question = form(name=Field(), size=Field("integer", default=2))
    assert question.check_answer(values={"name": "Ada", "size": ""}) == {"name": "Ada", "size": 2}
    error = rejects(question, "name", name="")
    assert error.errors["name"] == "a value is required"


def test_missing_required_values_name_each_field() -> None:
    question = form(first=Field(), last=Field(), age=Field("integer", required=False))
    rejects(question, "first", "last")
    rejects(question, "last", first="Ada", age=3)


@pytest.mark.parametrize(
    ("field", "given", "accepted"),
    [
        (Field("integer"), "3", 3),
        (Field("integer"), " -12 ", -12),
        (Field("integer"), 3.0, 3),
        (Field("number"), "2.5", 2.5),
        (Field("number"), "7", 7),
        (Field("number"), 1e3, 1000.0),
        (Field("boolean"), "true", True),
        (Field("boolean"), "False", False),
        (Field("boolean"), "on", True),
        (Field("boolean"), "0", False),
        (Field("boolean"), False, False),
        (Field("string"), " keep spaces ", " keep spaces "),
        (Field("array", choices=["a", "b", "c"]), "b", ["b"]),
        (Field("array", choices=["a", "b", "c"]), ("a", "c"), ["a", "c"]),
        (Field("string", format="date"), "2026-01-31", "2026-01-31"),
        (Field("string", format="date-time"), "2026-01-31T10:00:00+00:00", "2026-01-31T10:00:00+00:00"),
        (Field("string", format="email"), "ada@example.com", "ada@example.com"),
        (Field("string", format="uri"), "https://example.com/x", "https://example.com/x"),
    ],
)
def test_values_are_coerced_where_unambiguous(field: Field, given: Any, accepted: Any) -> None:
    question = form(value=field)
    result = question.check_answer(given)
    assert result == {"value": accepted}
    assert type(result["value"]) is type(accepted)


@pytest.mark.parametrize(
    ("field", "given", "says"),
    [
        (Field("integer"), True, "integer"),
        (Field("integer"), False, "integer"),
        (Field("integer"), "3.5", "integer"),
        (Field("integer"), 3.5, "integer"),
        (Field("integer"), "three", "integer"),
        (Field("number"), True, "number"),
        (Field("number"), "NaN", "number"),
        (Field("number"), math.inf, "number"),
        (Field("boolean"), 1, "true or false"),
        (Field("boolean"), "maybe", "true or false"),
        (Field("string"), 42, "text"),
        (Field("string", choices=["red", "green"]), "blue", "not one of the choices"),
        (Field("string", choices={"r": "Red"}), "Red", "not one of the choices"),
        (Field("integer", choices=[1, 2]), "3", "not one of the choices"),
        (Field("integer", minimum=1, maximum=5), "0", "at least 1"),
        (Field("integer", minimum=1, maximum=5), 6, "at most 5"),
        (Field("number", minimum=0.5), 0.25, "at least 0.5"),
        (Field("string", min_length=3), "ab", "at least 3 characters"),
        (Field("string", max_length=3), "abcd", "at most 3 characters"),
        (Field("string", pattern=r"^\d{4}$"), "12a4", "pattern"),
        (Field("string", format="email"), "not-an-email", "email"),
        (Field("string", format="date"), "31/01/2026", "date"),
        (Field("string", format="date-time"), "2026-01-31", "date-time"),
        (Field("string", format="uri"), "no scheme", "uri"),
        (Field("array", choices=["a", "b", "c"]), ["a", "z"], "not one of the choices"),
        (Field("array", choices=["a", "b", "c"]), ["a", "a"], "once"),
        (Field("array", choices=["a", "b", "c"], min_length=2), ["a"], "at least 2 items"),
        (Field("array", choices=["a", "b", "c"], max_length=1), ["a", "b"], "at most 1 items"),
        (Field("array", choices=["a", "b"]), 5, "list"),
    ],
)
def test_wrong_values_are_refused_naming_the_field(field: Field, given: Any, says: str) -> None:
    question = form(pick=field)
    error = rejects(question, "pick", pick=given)
    assert says in error.errors["pick"]


def test_every_wrong_field_is_named_at_once() -> None:
    question = form(age=Field("integer", minimum=0), ok=Field("boolean"), colour=Field(choices=["red"]))
    error = rejects(question, "age", "ok", "colour", age=-1, ok="perhaps", colour="blue")
    assert "age" in str(error)
    assert "colour" in str(error)


def test_a_positional_value_answers_a_one_field_question_only() -> None:
    assert form(n=Field("integer")).check_answer("4") == {"n": 4}
    assert form(n=Field("integer"), m=Field("integer")).check_answer({"n": 1, "m": "2"}) == {"n": 1, "m": 2}
    with pytest.raises(InvalidAnswerError, match="2 fields"):
        form(n=Field("integer"), m=Field("integer")).check_answer(1)


def test_an_approval_takes_no_value() -> None:
    approval = Question(id="a1", kind="approval", message="Approve?")
    assert approval.check_answer() == {}
    with pytest.raises(InvalidAnswerError, match="approval"):
        approval.check_answer("yes")


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"type": "date"}, "type must be one of"),
        ({"type": "boolean", "choices": [True]}, "no choices"),
        ({"type": "array"}, "needs choices"),
        ({"type": "string", "choices": []}, "non-empty"),
        ({"type": "string", "choices": "abc"}, "non-empty list"),
        ({"type": "string", "format": "phone"}, "format"),
        ({"type": "string", "pattern": "("}, "regular expression"),
        ({"type": "string", "min_length": -1}, "min_length"),
        ({"type": "integer", "maximum": "5"}, "maximum"),
        ({"type": "integer", "default": "x"}, "default"),
        ({"type": "integer", "minimum": 3, "default": 1}, "default"),
    ],
)
def test_bad_fields_are_refused(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Field(name="f", **kwargs)


def test_bad_questions_are_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        Question(id="x", kind="poll", message="?")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique names"):
        form(Field(name="a"), Field(name="a"))
    with pytest.raises(ValueError, match="unique names"):
        form(Field())
    with pytest.raises(ValueError, match="url"):
        Question(id="x", kind="url", message="?")
    with pytest.raises(ValueError, match="no fields"):
        Question(id="x", kind="approval", message="?", fields=(Field(name="a"),))


def test_a_question_is_a_value_its_decision_a_verdict_read_through_its_properties() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    asked = Question(
        "q-2", "approval", "Pay?", tool_call=ToolCall("call-1", "pay", {"to": "Ada"}), asked_at=now,
        policy=Approval(count=2), extra={"mode": "x"},
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.decision = "accept"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.verdict = Verdict("accept", now)  # type: ignore[misc]
    counted = asked.with_vote(Vote(Principal("ann"), now))
    verdict = Verdict("accept", now, answer={}, by=Principal("bob", "Bob"), channel="web")
    decided = counted.with_vote(Vote(Principal("bob", "Bob"), now)).decided_with(verdict)
    assert (asked.votes, asked.verdict, asked.decision, asked.decided_by) == ((), None, None, None)
    assert len(counted.votes) == 1 and counted.verdict is None
    assert decided.verdict is verdict and [vote.principal.id for vote in decided.votes] == ["ann", "bob"]
    assert (decided.decision, decided.answer, decided.note) == ("accept", {}, None)
    assert (decided.decided_at, decided.decided_by, decided.channel) == (now, Principal("bob", "Bob"), "web")
    assert decided.to_dict()["decision"] == "accept" and decided.to_dict()["channel"] == "web"
    assert decided.extra == {"mode": "x"} and decided.id == asked.id and decided.tool_call is asked.tool_call
    with pytest.raises(ValueError, match="decision must be one of accept, decline, cancel, respond; got 'maybe'"):
        Verdict("maybe", now)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at must be a datetime, got str"):
        Verdict("accept", "now")  # type: ignore[arg-type]


def test_a_restored_question_is_the_question_its_values_make() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    values: dict[str, Any] = {
        "id": "q-3", "kind": "form", "message": "Where?", "fields": (Field("string", name="city"),),
        "asked_at": now, "verdict": Verdict("accept", now, answer={"city": "Oslo"}), "awaited": True,
    }  # fmt: skip
    restored, built = Question.restored(**values), Question(**values)
    assert dataclasses.asdict(restored) == dataclasses.asdict(built)
    assert restored.extra == {} and restored.extra is not Question.restored(id="q-4", kind="url", message="").extra
    with pytest.raises(dataclasses.FrozenInstanceError):
        restored.message = "Elsewhere?"  # type: ignore[misc]


def test_field_labels_and_choice_titles() -> None:
    field = Field(choices={"s": "Small", "l": "Large"}, name="size")
    assert field.label == "size"
    assert Field(title="Size", name="size").label == "Size"
    assert field.choice_values == ["s", "l"]
    assert field.choice_title("l") == "Large"
    assert Field(choices=["s"]).choice_title("s") == "s"


def test_schema_shapes() -> None:
    assert Field("integer", minimum=1, maximum=5, title="Stars").to_schema() == {
        "type": "integer",
        "title": "Stars",
        "minimum": 1,
        "maximum": 5,
    }
    assert Field(choices={"r": "Red"}).to_schema() == {"type": "string", "oneOf": [{"const": "r", "title": "Red"}]}
    assert Field(choices=["r", "g"]).to_schema() == {"type": "string", "enum": ["r", "g"]}
    assert Field("array", choices=["a", "b"], max_length=1).to_schema() == {
        "type": "array",
        "items": {"type": "string", "enum": ["a", "b"]},
        "maxItems": 1,
    }
    question = form(a=Field(), b=Field("boolean", required=False))
    assert question.requested_schema == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}},
        "required": ["a"],
    }


def test_from_schema_reads_legacy_enum_names() -> None:
    legacy = {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]}
    field = Field.from_schema("c", legacy)
    assert field.choices == {"r": "Red", "g": "Green"}
    assert field.legacy_titles and field.to_schema() == legacy
    assert "oneOf" in Field(choices={"r": "Red"}).to_schema()
    with pytest.raises(ValueError, match="legacy_titles needs a single choice with titles"):
        Field(choices=["r", "g"], legacy_titles=True)
    with pytest.raises(ValueError, match="legacy_titles"):
        Field("array", choices={"r": "Red"}, legacy_titles=True)
    with pytest.raises(ValueError, match="items"):
        Field.from_schema("c", {"type": "array"})
    with pytest.raises(ValueError, match="object"):
        Field.from_schema("c", "string")  # type: ignore[arg-type]


# Property tests: random fields, values made valid or invalid by construction.

texts = st.text(alphabet=string.ascii_letters + string.digits + " -_.é", min_size=1, max_size=12)
titles = st.none() | st.text(min_size=1, max_size=10)
PATTERNS = {r"^[a-z]{2,5}$": r"[a-z]{2,5}", r"^\d{3}-\d{2}$": r"[0-9]{3}-[0-9]{2}"}  # ECMA-262 \d is ASCII only


@st.composite
def bounds(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> tuple[Any, Any]:
    low, high = draw(st.none() | values), draw(st.none() | values)
    if low is not None and high is not None and low > high:
        low, high = high, low
    return low, high


@st.composite
def fields(draw: st.DrawFn) -> Field:
    kind = draw(st.sampled_from(["string", "number", "integer", "boolean", "array"]))
    extra: dict[str, Any] = {
        "required": draw(st.booleans()),
        "title": draw(titles),
        "description": draw(titles),
        "name": "f",
    }
    if kind in ("string", "array"):
        choices = draw(st.none() | st.lists(texts, min_size=1, max_size=5, unique=True))
        if kind == "array" and choices is None:
            choices = draw(st.lists(texts, min_size=1, max_size=5, unique=True))
        if choices is not None and draw(st.booleans()):
            extra["choices"] = {value: draw(texts) for value in choices}
        else:
            extra["choices"] = choices
        if kind == "array":
            low, high = draw(bounds(st.integers(0, len(choices))))
            extra.update(min_length=low, max_length=high)
        elif choices is None:
            shape = draw(st.sampled_from(["lengths", "pattern", "date", "date-time"]))
            if shape == "lengths":
                low, high = draw(bounds(st.integers(0, 20)))
                extra.update(min_length=low, max_length=high)
            elif shape == "pattern":
                extra["pattern"] = draw(st.sampled_from(sorted(PATTERNS)))
            else:
                extra["format"] = shape
    elif kind == "integer":
        if draw(st.booleans()):
            extra["choices"] = draw(st.lists(st.integers(-1000, 1000), min_size=1, max_size=5, unique=True))
        else:
            low, high = draw(bounds(st.integers(-1000, 1000)))
            extra.update(minimum=low, maximum=high)
    elif kind == "number":
        # + 0.0 turns -0.0 into 0.0: bounds of 0.0 and -0.0 compare equal but make no range st.floats accepts.
        floats = st.floats(-1e6, 1e6, allow_nan=False).map(lambda number: number + 0.0)
        low, high = draw(bounds(floats | st.integers(-1000, 1000)))
        extra.update(minimum=low, maximum=high)
    field = Field(kind, **extra)
    if draw(st.booleans()):
        field = Field(kind, **extra, default=draw(valid_values(field)))
    return field


@st.composite
def valid_values(draw: st.DrawFn, field: Field) -> Any:
    choices = list(field.choices) if field.choices is not None else None
    if field.type == "boolean":
        return draw(st.booleans())
    if field.type == "array":
        assert choices is not None
        low = max(1, field.min_length or 0)
        high = len(choices) if field.max_length is None else field.max_length
        assume(low <= high)
        return draw(st.lists(st.sampled_from(choices), min_size=low, max_size=high, unique=True))
    if choices is not None:
        return draw(st.sampled_from(choices))
    if field.type == "integer":
        low = None if field.minimum is None else math.ceil(field.minimum)
        high = None if field.maximum is None else math.floor(field.maximum)
        return draw(st.integers(low, high))
    if field.type == "number":
        numbers = st.floats(field.minimum, field.maximum, allow_nan=False, allow_infinity=False)
        low = None if field.minimum is None else math.ceil(field.minimum)
        high = None if field.maximum is None else math.floor(field.maximum)
        if low is None or high is None or low <= high:
            numbers |= st.integers(low, high).filter(lambda number: abs(number) < 10**15)
        return draw(numbers)
    if field.pattern is not None:
        return draw(st.from_regex(PATTERNS[field.pattern], fullmatch=True))
    if field.format == "date":
        return draw(st.dates()).isoformat()
    if field.format == "date-time":
        return draw(st.datetimes()).isoformat()
    low = max(1, field.min_length or 0)
    high = field.max_length
    assume(high is None or low <= high)
    text = st.text(alphabet=st.characters(exclude_characters="\x00"), min_size=low, max_size=high)
    return draw(text.filter(lambda text: text != ""))  # text never holds NUL


@st.composite
def invalid_values(draw: st.DrawFn, field: Field) -> Any:
    """A value the field must refuse, chosen from the ways this field can be wrong."""
    options: list[st.SearchStrategy[Any]] = []
    if field.type == "boolean":
        options += [st.integers(), st.sampled_from(["maybe", "yes please", "2"])]
    elif field.type == "integer":
        options += [st.booleans(), st.sampled_from(["three", "1.5", "1e3"]), st.floats(0.1, 0.9)]
        if field.minimum is not None:
            options.append(st.integers(max_value=math.ceil(field.minimum) - 1))
        if field.maximum is not None:
            options.append(st.integers(min_value=math.floor(field.maximum) + 1))
        if field.choices is not None:
            options.append(st.integers(-5000, 5000).filter(lambda value: value not in field.choice_values))
    elif field.type == "number":
        options += [st.booleans(), st.sampled_from(["lots", "NaN", "inf"]), st.just(math.nan)]
        if field.minimum is not None:
            options.append(st.just(field.minimum - 1))
        if field.maximum is not None:
            options.append(st.just(field.maximum + 1))
    elif field.type == "array":
        values = field.choice_values
        options += [st.integers(), st.just(["not a choice §"]), st.just([values[0], values[0]])]
        if field.max_length is not None and field.max_length < len(values):
            options.append(st.just(values[: field.max_length + 1]))
        if field.min_length is not None and field.min_length > 1:
            options.append(st.just(values[: field.min_length - 1]))
    else:
        options.append(st.integers() | st.booleans() | st.lists(st.integers(), min_size=1))
        if field.choices is not None:
            options.append(texts.filter(lambda value: value not in field.choice_values))
        if field.max_length is not None:
            options.append(st.text(alphabet="x", min_size=field.max_length + 1, max_size=field.max_length + 3))
        if field.min_length is not None and field.min_length > 1:
            options.append(st.text(alphabet="x", min_size=1, max_size=field.min_length - 1))
        if field.pattern is not None:
            options.append(st.sampled_from(["A", "ZZZZZZ", "12-345"]))
        if field.format is not None:
            options.append(st.sampled_from(["tomorrow", "2026-13-45", "31.01.2026"]))
    return draw(st.one_of(options))


@given(st.data())
def test_valid_values_are_accepted_unchanged(data: st.DataObject) -> None:
    field = data.draw(fields())
    value = data.draw(valid_values(field))
    question = form(field)
    assert question.check_answer(values={"f": value, "unasked": "dropped"}) == {"f": value}
    assert question.check_answer(value) == {"f": value}
    if field.type == "integer" or (field.type == "boolean"):
        # A web form sends text: it is coerced back to the same value.
        text = str(value).lower() if field.type == "boolean" else str(value)
        assert question.check_answer(text) == {"f": value}


@given(st.data())
def test_invalid_values_are_refused_naming_the_field(data: st.DataObject) -> None:
    field = data.draw(fields())
    value = data.draw(invalid_values(field))
    question = form(field)
    with pytest.raises(InvalidAnswerError) as raised:
        question.check_answer(values={"f": value})
    assert list(raised.value.errors) == ["f"]
    assert str(raised.value).startswith("Invalid answer: f: ")


@given(st.data())
def test_omitted_values_fill_defaults_or_are_required(data: st.DataObject) -> None:
    field = data.draw(fields())
    question = form(field)
    if field.default is not None:
        assert question.check_answer() == {"f": field.default}
    elif field.required:
        with pytest.raises(InvalidAnswerError, match="f: a value is required"):
            question.check_answer()
    else:
        assert question.check_answer() == {}


@given(st.lists(fields(), min_size=1, max_size=5), st.data())
def test_several_fields_name_exactly_the_wrong_ones(items: list[Field], data: st.DataObject) -> None:
    named = [item.named(f"field_{index}") for index, item in enumerate(items)]
    wrong = data.draw(st.sets(st.sampled_from([item.name for item in named])))
    values = {}
    for item in named:
        assert item.name is not None
        values[item.name] = data.draw(invalid_values(item) if item.name in wrong else valid_values(item))
    question = form(*named)
    if not wrong:
        assert question.check_answer(values=values) == values
        return
    with pytest.raises(InvalidAnswerError) as raised:
        question.check_answer(values=values)
    assert set(raised.value.errors) == wrong


@given(fields())
def test_fields_map_to_a_schema_and_back_without_loss(field: Field) -> None:
    schema = field.to_schema()
    assert Field.from_schema("f", schema, required=field.required) == field
    question = form(field)
    assert question.requested_schema["properties"] == {"f": schema}
    assert question.requested_schema["required"] == (["f"] if field.required else [])
