"""Agents: reusable chat definitions that any process can rebuild a chat from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tarry.chat import Chat
from tarry.messages import Model, ToolChoice
from tarry.providers import resolve_model
from tarry.tools import Tool, ToolSource

ModelFactory = Callable[[], Model]
"""A function that makes a fresh model for each chat (for models that keep state, like ``ScriptedModel``)."""


class Agent:
    """A named chat definition: its model, its tools, its instructions, its tool choice and model settings.

    ``model`` is a [`Model`][tarry.messages.Model], a ``"provider:model"`` string, or a function
    of no arguments that makes a model for each chat. A stored chat made from an agent
    (``store.create_chat(agent=support)``) records the agent's name, so a worker that is given
    the agent rebuilds the chat with the same model and tools. ``tool_choice`` and ``settings``
    are the defaults of its chats (see [`Chat`][tarry.Chat]): a small local model often needs
    ``tool_choice`` set to its one tool's name.

    >>> from tarry.testing import ScriptedModel
    >>> support = Agent("support", model=lambda: ScriptedModel(["Hello!"]))
    >>> support.chat().ask_sync("Hi").content
    'Hello!'
    """

    def __init__(
        self,
        name: str,
        *,
        model: Model | str | ModelFactory | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        tool_choice: ToolChoice | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValueError(f"An agent's name is a non-empty str of at most 200 characters, got {name!r}")
        if model is not None and not isinstance(model, str | Model) and not callable(model):
            raise TypeError(f"model must be a Model, a 'provider:model' string or a function, got {model!r}")
        if isinstance(tools, Tool | ToolSource):
            raise TypeError("tools must be a list of tools, not a single tool")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be str or None, got {type(instructions).__name__}")
        self.name = name
        self.model = model
        self.tools = list(tools)
        self.instructions = instructions
        self.tool_choice = tool_choice
        self.settings = dict(settings or {})
        Chat(None, self.tools, tool_choice=tool_choice)  # refuses a tool_choice naming no tool, as each chat would

    def make_model(self) -> Model | None:
        """The model for one chat: the agent's model, or a fresh one from its factory."""
        model = self.model
        if model is None or isinstance(model, str | Model):
            return resolve_model(model)
        made = model()
        if not isinstance(made, Model):
            raise TypeError(f"The model factory of agent {self.name!r} returned {made!r}, not a Model")
        return made

    def chat(self, **options: Any) -> Chat:
        """A new in-memory chat of this agent; ``options`` go to [`Chat`][tarry.Chat], before the agent's own."""
        model = options.pop("model") if "model" in options else self.make_model()
        options.setdefault("tool_choice", self.tool_choice)
        options["settings"] = {**self.settings, **(options.get("settings") or {})}
        return Chat(model, self.tools, self.instructions, **options)

    def __repr__(self) -> str:
        return f"<Agent {self.name!r} tools={len(self.tools)}>"
