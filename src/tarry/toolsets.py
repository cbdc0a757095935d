"""A chat's tools: those it was given, by name, and the tool sources (MCP servers) it asks for more."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeGuard

from tarry.calls import mint
from tarry.clock import utcnow
from tarry.journal import Journal
from tarry.messages import ToolChoice
from tarry.questions import AnswerNeeded, Question
from tarry.tools import Tool, ToolSource, tools_by_name
from tarry.tracing import mark, span_ids

logger = logging.getLogger("tarry")


class SelectedSource:
    """A tool source with the chat's choice of its tools (``with_mcp``'s only/exclude/prefix)."""

    def __init__(
        self,
        source: ToolSource,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        prefix: str | None = None,
    ) -> None:
        self.source = source
        self.only = None if only is None else set(only)
        self.exclude = set(exclude or ())
        self.prefix = prefix or ""
        self.loaded = False

    async def tools(self) -> list[Tool]:
        """The source's tools the chat chose, each named with the prefix."""
        chosen = []
        for item in await self.source.list_tools():
            if (self.only is not None and item.name not in self.only) or item.name in self.exclude:
                continue
            if self.prefix:
                item = copy.copy(item)
                item.name = self.prefix + item.name
            chosen.append(item)
        return chosen


def split_tools(
    tools: Iterable[Tool | ToolSource | Callable[..., Any]],
) -> tuple[list[SelectedSource], dict[str, Tool]]:
    """The tool sources among ``tools`` (each with all its tools chosen), and the other tools by name."""
    if not isinstance(tools, list | tuple) and (isinstance(tools, Tool | ToolSource) or callable(tools)):
        raise TypeError("tools must be a list of tools, not a single tool")
    given = list(tools)
    sources = [SelectedSource(item) for item in given if _is_source(item)]
    return sources, tools_by_name([item for item in given if not _is_source(item)], where="a chat")


async def load_sources(sources: Iterable[SelectedSource], tools: dict[str, Tool]) -> None:
    """Ask every source not yet asked for its tools, adding them to ``tools``; a name taken twice is refused."""
    for source in sources:
        if source.loaded:
            continue
        tools_by_name(await source.tools(), where="a chat", into=tools)
        source.loaded = True


def _is_source(item: object) -> TypeGuard[ToolSource]:
    """Whether ``item`` supplies tools; a [`Tool`][tarry.Tool] does only if it also lists tools, which is quicker to ask
    than the protocol (about 10 µs a check)."""
    return hasattr(item, "list_tools") if isinstance(item, Tool) else isinstance(item, ToolSource)


async def load_or_ask(
    sources: Iterable[SelectedSource], tools: dict[str, Tool], journal: Journal, chat_id: str, *, asked: int, said: int
) -> Question | None:
    """Load the tools of ``sources`` into ``tools``; or, when a source needs a person first (``AnswerNeeded``: a
    login), the chat's own question it asks, saved through ``journal`` as the chat's question number ``asked``,
    once ``said`` messages were said. Raises the ``AnswerNeeded`` when the journal cannot keep the question."""
    try:
        await load_sources(sources, tools)
    except AnswerNeeded as needed:
        question = needed.question = mint(replace(needed.question, messages_said=said), None, chat_id)
        if not await journal.add_chat_question(asked, question):
            raise
        ids = {"chat_id": chat_id, "question_id": question.id}
        logger.info("Chat %s parked: it waits on a %s question of its own", chat_id, question.kind, extra=ids)
        mark("pause chat", {**span_ids(ids), "tarry.pause.reason": "question"})
        return question
    return None


async def load_or_park(
    sources: Iterable[SelectedSource],
    tools: dict[str, Tool],
    journal: Journal,
    chat_id: str,
    own: list[Question],
    said: int,
    *,
    stopped: bool,
) -> bool:
    """Load the tools of ``sources`` into ``tools``; ``False`` when the chat waits on a question of its own instead.

    ``own`` holds the chat's own questions (a question a source asks joins them), ``said`` how many messages
    were said. A source that needs a person first (``AnswerNeeded``: a login) is asked again only once the
    chat's last own question was answered, or lapsed; a declined or cancelled one (``stopped``) stops the
    chat until the user asks something new.
    """
    now = utcnow()
    if stopped or any(question.is_open(now) for question in own):
        return False
    question = await load_or_ask(sources, tools, journal, chat_id, asked=len(own), said=said)
    if question is not None:
        own.append(question)
    return question is None


def check_tool_choice(tool_choice: ToolChoice | None, sources: list[SelectedSource], tools: Mapping[str, Tool]) -> None:
    """Refuse a tool choice that is none of the choices and names none of ``tools`` (while no source's tools are
    known, any name is taken)."""
    named = sources or tool_choice in ("auto", "none", "required", *tools)
    if tool_choice is not None and not named:
        raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a tool's name; got {tool_choice!r}")
