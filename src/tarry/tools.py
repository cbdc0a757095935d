"""Tools the model can call: ``Tool`` subclasses and the ``@tool`` decorator."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, Self, TypeVar, get_type_hints, overload, runtime_checkable

import pydantic

from tarry.approvals import Approval
from tarry.edits import editable_schema
from tarry.errors import InvalidArgumentsError, TarryWarning
from tarry.messages import ToolCall, ToolSchema
from tarry.questions import Field, FieldType, Question
from tarry.tasks import Task

_PLAIN_TYPES: dict[type, FieldType] = {str: "string", int: "integer", float: "number", bool: "boolean"}
ApprovalRule = bool | Callable[[ToolCall], bool]
F = TypeVar("F", bound=Callable[..., Any])


def _snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _camel_case(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name) if part) or "Tool"


def _warn_if_unclear(what: str, description: str, function: Callable[..., Any]) -> None:
    """Warn ([`TarryWarning`][tarry.errors.TarryWarning]) when the model would see no description or an untyped
    parameter."""
    problems = []
    if not description.strip():
        problems.append("has no description (give it a docstring or description=...)")
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        parameters = []  # type: ignore[assignment]
    untyped = [
        parameter.name
        for parameter in parameters
        if parameter.name != "self"
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        and parameter.annotation is parameter.empty
    ]
    if untyped:
        problems.append(f"has untyped parameters, {', '.join(untyped)} (the model is told they may be anything)")
    if problems:
        warnings.warn(f"{what} {' and '.join(problems)}", TarryWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this module (the user's definition)."""
    level, frame = 2, sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


class Tool:
    """A tool the model can call.

    Subclass it and write ``execute`` with typed parameters: the name comes from the class
    name (``TransferMoney`` becomes ``transfer_money``; a trailing ``Tool`` is dropped), the
    description from the docstring, and the JSON schema from the signature. ``execute``
    returns the result (text is kept verbatim, anything else is sent as JSON), or a
    [`Task`][tarry.Task] to pause the call; ``resume`` carries a paused call on.

    Attributes to set on a subclass:

    - ``requires_approval``: ``True``, ``False``, an [`Approval`][tarry.approvals.Approval] policy
      (``Approval(count=2, by="finance")``: two people of finance), or a method
      ``(self, call) -> bool | Approval``.
    - ``approval_ttl``: seconds a person has to approve, or ``None`` for no limit.
    - ``editable``: what a person may change of a call's arguments while approving it: ``True`` (every parameter,
      the default), ``False`` (nothing) or the names of the parameters that may change (see
      [`tarry.edits`][tarry.edits]).
    - ``idempotent``: ``True`` when running a call twice is harmless, so a call whose
      process died is run again instead of being closed as interrupted.
    - ``checks_in_batches``: ``True`` (the default) lets a worker check this tool's working tasks in batches,
      without a full chat step each ([`Worker`][tarry.jobs.Worker]). Set ``False`` when ``resume`` asks a person
      something as it runs (``current_call``): a batched check cannot record that question, so a full step runs
      that ``resume`` again, and the code before its question runs twice.
    - ``task_class``: the [`Task`][tarry.Task] subclass [`load_task`][tarry.Tool.load_task] rebuilds.
    """

    name: str = ""
    description: str = ""
    requires_approval: bool | Approval | Callable[..., bool | Approval] = False
    approval_ttl: float | None = None
    editable: bool | Collection[str] = True
    idempotent: bool = False
    checks_in_batches: bool = True
    task_class: ClassVar[type[Task]] = Task

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = _snake_case(re.sub(r"Tool$", "", cls.__name__) or cls.__name__)
        if "description" not in cls.__dict__:
            cls.description = inspect.cleandoc(cls.__doc__ or "")
        cls._arguments_model = None
        for moved in ("task_required", "ask_before_task"):
            if moved in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__} sets {moved}, which tarry's MCP server takes now: "
                    f"serve(..., {moved}=[{cls.name!r}]) or tarry mcp serve --{moved.replace('_', '-')} {cls.name}"
                )
        if "execute" in cls.__dict__:
            _warn_if_unclear(f"Tool {cls.__name__}", cls.description, cls.__dict__["execute"])

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls.execute is Tool.execute:
            raise TypeError(
                f"{cls.__name__} defines no execute(): a Tool subclass needs "
                "'def execute(self, <typed parameters>)' that runs the call"
            )
        return super().__new__(cls)

    _arguments_model: ClassVar[type[pydantic.BaseModel] | None] = None

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments, as the model is shown it (a fresh copy each time)."""
        schema: dict[str, Any] = json.loads(_schema_text(self._model()))
        return schema

    def schema(self) -> ToolSchema:
        """What a model adapter sends to describe this tool."""
        return ToolSchema(name=self.name, description=self.description, parameters=self.parameters)

    def needs_approval(self, call: ToolCall) -> bool:
        """Whether a person must approve ``call`` before it runs (``requires_approval`` applied)."""
        return self.approval_policy(call) is not None

    def approval_policy(self, call: ToolCall) -> Approval | None:
        """The approval ``call`` needs (``requires_approval`` applied once): ``None`` when it needs none.

        ``True`` is ``Approval()``: one person, anyone.
        """
        rule = self.requires_approval
        verdict = rule(call) if callable(rule) else rule
        if isinstance(verdict, Approval):
            return verdict
        return Approval() if verdict else None

    def editable_schema(self) -> dict[str, Any] | None:
        """The JSON schema of the parameters a person may change while approving a call (``editable`` applied), or
        ``None`` when they may change none; raises ``ValueError`` when ``editable`` names no parameter of the tool."""
        return editable_schema(self.name, self.parameters, self.editable)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments ``execute`` receives; raises [`InvalidArgumentsError`][tarry.errors.InvalidArgumentsError]
        naming the problem."""
        model = self._model()
        try:
            parsed = model.model_validate(dict(arguments))
        except pydantic.ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, item['loc'])) or 'arguments'}: {item['msg']}" for item in error.errors()
            )
            raise InvalidArgumentsError(f"Invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in model.model_fields}

    def execute(self, *args: Any, **arguments: Any) -> Any:
        """Run the call; return its result or a [`Task`][tarry.Task] to pause it. Sync or async.

        The chat passes the validated arguments as keywords. (``*args`` is never used: with
        it, a subclass may declare its own typed parameters and still type-check.)
        """
        raise NotImplementedError(f"{type(self).__name__} must define execute()")

    def resume(self, task: Task, *args: Any, **arguments: Any) -> Any:
        """Carry a paused call on; return its result, or the task to stay paused.

        Called once on every ``complete()`` while the call is paused and waits on no one.
        The default suits tools that only ask: once the person answered the question the
        task asked (``self.ask(...)``), the answer's values are the result the model gets
        (a URL question's consent is ``"accepted"``; several questions give a list, in order).
        Otherwise it checks on the work with ``task.refresh()``.
        """
        answered = [
            question for question in task.questions if question.source is None and question.decision == "accept"
        ]
        if answered:
            values = ["accepted" if question.kind == "url" else question.answer for question in answered]
            return values[0] if len(values) == 1 else values
        return task.refresh()

    def load_task(self, state: Mapping[str, Any], tool_call: ToolCall | None = None) -> Task:
        """Rebuild a saved task of this tool (``task_class.load``)."""
        return self.task_class.load(state, tool_call=tool_call)

    def ask(
        self,
        message: str,
        /,
        *,
        ttl: float | None = None,
        url: str | None = None,
        policy: Approval | None = None,
        **fields: Any,
    ) -> Task:
        """A paused task whose call waits on a person's answer; return it from ``execute`` or ``resume``.

        Each keyword is a field: a [`Field`][tarry.Field] or a plain ``str``, ``int``, ``float``
        or ``bool`` for a required field of that type. ``url=`` asks the person to visit a
        URL instead. ``ttl`` is how many seconds the question stays open. ``policy`` (an
        [`Approval`][tarry.approvals.Approval] with ``count=1``) says who may answer (``by``) and follows the question
        up while nobody answers: ``remind_after``, ``escalate_after``/``escalate_to``, and ``on_timeout="decline"``
        to have it declined (never answered) when its ``ttl`` runs out.
        """
        return Task(status="input_required").with_question(ask(message, ttl=ttl, url=url, policy=policy, **fields))

    def _model(self) -> type[pydantic.BaseModel]:
        cls = type(self)
        if cls._arguments_model is None:
            cls._arguments_model = _arguments_model(self._signature_source(), f"{cls.__name__}Arguments")
        return cls._arguments_model

    def _signature_source(self) -> Callable[..., Any]:
        return self.execute

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def ask(
    message: str, /, *, ttl: float | None = None, url: str | None = None, policy: Approval | None = None, **fields: Any
) -> Question:
    """The question behind [`Tool.ask`][tarry.Tool.ask], before the chat records it."""
    if not isinstance(message, str) or not message.strip():
        raise ValueError(f"A question needs a message, got {message!r}")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0):
        raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
    _check_question_policy(policy)
    if url is not None:
        if fields:
            raise ValueError(f"A URL question asks for no fields; got {', '.join(fields)}")
        if not isinstance(url, str) or not re.match(r"https?://[^\s]+$", url):
            raise ValueError(f"A question's url must be an http(s) URL, got {url!r}")
        return Question(id="", kind="url", message=message, url=url, ttl=ttl, policy=policy)
    return Question(
        id="",
        kind="form",
        message=message,
        fields=tuple(_field(name, spec) for name, spec in fields.items()),
        ttl=ttl,
        policy=policy,
    )


def _check_question_policy(policy: object) -> None:
    """Refuse a policy a tool's question cannot hold: one answer settles a question, so it counts one person."""
    if policy is None:
        return
    if not isinstance(policy, Approval):
        raise TypeError(f"A question's policy must be an Approval or None, got {type(policy).__name__}")
    if policy.count != 1 or policy.grant_suffices:
        raise ValueError(
            "A question asked by a tool takes one answer: its policy takes no count above 1 and no grant_suffices "
            f"(got count={policy.count}, grant_suffices={policy.grant_suffices})"
        )


def _field(name: str, spec: Any) -> Field:
    if isinstance(spec, Field):
        return spec.named(name)
    if isinstance(spec, type) and spec in _PLAIN_TYPES:
        return Field(_PLAIN_TYPES[spec], name=name)
    raise TypeError(f"Field {name!r} must be a Field or one of str, int, float, bool; got {spec!r}")


@runtime_checkable
class ToolSource(Protocol):
    """Something that supplies tools, such as an MCP server: ``Chat(tools=[tool_a, source])``.

    The chat calls [`list_tools`][tarry.tools.ToolSource.list_tools] once, before it first needs its tools (a model
    request or running a call), and adds the tools it returns.
    """

    async def list_tools(self) -> Sequence[Tool]:
        """The tools this source supplies."""
        ...


class FunctionTool(Tool):
    """A tool made from a function by [`tool`][tarry.tool]."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool | Approval | Callable[[ToolCall], bool | Approval] = False,
        approval_ttl: float | None = None,
        idempotent: bool = False,
        editable: bool | Collection[str] = True,
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        self.description = description if description is not None else inspect.cleandoc(function.__doc__ or "")
        self.requires_approval = requires_approval
        self.approval_ttl = approval_ttl
        self.idempotent = idempotent
        self.editable = editable
        self._function_model = _arguments_model(function, f"{_camel_case(self.name)}Arguments")
        self.editable_schema()  # refuse now an editable that names no parameter
        _warn_if_unclear(f"Tool {self.name}", self.description, function)

    def execute(self, **arguments: Any) -> Any:
        """Call the function."""
        return self.function(**arguments)

    def _model(self) -> type[pydantic.BaseModel]:
        return self._function_model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


@overload
def tool(function: F, /) -> FunctionTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Approval | Callable[[ToolCall], bool | Approval] = False,
    approval_ttl: float | None = None,
    idempotent: bool = False,
    editable: bool | Collection[str] = True,
) -> Callable[[F], FunctionTool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Approval | Callable[[ToolCall], bool | Approval] = False,
    approval_ttl: float | None = None,
    idempotent: bool = False,
    editable: bool | Collection[str] = True,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a function (sync or async): ``@tool`` or ``@tool(requires_approval=True)``.

    ``editable`` says what a person may change of a call's arguments while approving it: ``True`` every parameter,
    ``False`` none, or the names of those that may change.

    The name is the function's, the description its docstring, the parameters its typed
    signature. The function stays callable as before.
    """

    def wrap(target: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            target,
            name=name,
            description=description,
            requires_approval=requires_approval,
            approval_ttl=approval_ttl,
            idempotent=idempotent,
            editable=editable,
        )

    return wrap if function is None else wrap(function)


def tools_by_name(items: Iterable[object], *, where: str, into: dict[str, Tool] | None = None) -> dict[str, Tool]:
    """``items`` (tools, or functions made tools as ``@tool`` makes them) by name, added to ``into`` when given.

    Raises ``TypeError`` for an item that is neither, and ``ValueError`` for a name taken twice in ``where``
    (``"a chat"``, say), naming it.
    """
    by_name = {} if into is None else into
    for item in items:
        made = item if isinstance(item, Tool) else tool(item) if callable(item) else None
        if made is None:
            raise TypeError(f"A tool must be a Tool or a function, got {item!r}")
        if made.name in by_name:
            raise ValueError(f"Two tools are named {made.name!r}; tool names must be unique in {where}")
        by_name[made.name] = made
    return by_name


async def call_maybe_async(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``function``: await it when it is async, else run it in a worker thread; await what it returns."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__func__", None)):
        result = await function(*args, **kwargs)
    else:
        result = await asyncio.to_thread(function, *args, **kwargs)
    return await settle(result)


async def settle(value: Any) -> Any:
    """``value``, awaited while it is awaitable."""
    while inspect.isawaitable(value):
        value = await value
    return value


def _arguments_model(function: Callable[..., Any], model_name: str) -> type[pydantic.BaseModel]:
    signature = inspect.signature(function)
    try:
        hints = get_type_hints(function, include_extras=True)
    except (NameError, TypeError) as error:
        raise TypeError(f"Cannot read the type hints of {function.__qualname__}: {error}") from None
    definitions: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.name == "self":
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{function.__qualname__}: tool parameters must be named; *{parameter.name} is not")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"{function.__qualname__}: parameter {parameter.name!r} must not be positional-only")
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        definitions[parameter.name] = (annotation, default)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    return pydantic.create_model(model_name, __config__=config, **definitions)


@functools.cache
def _schema_text(model: type[pydantic.BaseModel]) -> str:
    """The cleaned JSON schema of an arguments model, built once per model (building it is slow)."""
    return json.dumps(_clean_schema(model.model_json_schema()))


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for item in schema.get("properties", {}).values():
        if isinstance(item, dict):
            item.pop("title", None)
    schema.setdefault("properties", {})
    return schema
