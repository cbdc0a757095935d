"""One run of a chat's loop: carry on every call that can go on, then let the model speak, until the chat parks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from tarry.calls import CallRecord
from tarry.carrying import CallCarrier
from tarry.errors import PendingToolCallsError, TarryError
from tarry.journal import Journal
from tarry.messages import Message, MessageDone, Model, StreamEvent, ToolChoice
from tarry.questions import Question
from tarry.tools import Tool
from tarry.toolsets import SelectedSource, load_or_park
from tarry.turn import ModelTurn, refuse_while_calls_wait

logger = logging.getLogger("tarry")


class LoopedChat(Protocol):
    """What the loop reads and changes of a chat: [`Chat`][tarry.Chat] is one."""

    @property
    def id(self) -> str: ...
    @property
    def model(self) -> Model | None: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def tool_choice(self) -> ToolChoice | None: ...
    @property
    def settings(self) -> Mapping[str, Any]: ...
    @property
    def max_concurrency(self) -> int: ...
    @property
    def messages(self) -> list[Message]: ...
    @property
    def records(self) -> dict[str, CallRecord]: ...
    @property
    def tools(self) -> dict[str, Tool]: ...
    @property
    def chat_questions(self) -> list[Question]: ...
    @property
    def waiting(self) -> bool: ...
    @property
    def stopped(self) -> bool: ...


class ChatLoop:
    """The loop of ``chat`` over its ``journal``, within the caller's journal session.

    ``look`` takes in what other processes recorded since the chat last looked.
    """

    def __init__(
        self,
        chat: LoopedChat,
        journal: Journal,
        sources: Sequence[SelectedSource],
        look: Callable[[], Awaitable[None]],
    ) -> None:
        self.chat = chat
        self.journal = journal
        self.sources = sources
        self.look = look

    async def add_user_message(self, text: str, verb: str) -> None:
        """Save the user's message, claiming the turn for the reply.

        The journal refuses the message while calls wait in the database; the loop looks at them
        then, to name them.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{verb}() needs the user's text, got {text!r}")
        message = Message("user", text)
        try:
            refuse_while_calls_wait(self.chat.records.values())
            await self.journal.append(message, claim_turn=self.chat.model is not None)
        except PendingToolCallsError:
            await self.look()
            refuse_while_calls_wait(self.chat.records.values())
            raise
        self.chat.messages.append(message)

    async def run(self, *, stream: bool, once: bool) -> AsyncIterator[StreamEvent]:
        """Carry on every call that can go on, then ask the model while it has something to answer (once, with
        ``once``); yields the model's stream events (only ``MessageDone`` unless ``stream``)."""
        chat = self.chat
        if not all(source.loaded for source in self.sources):
            await self.look()
            own, said = chat.chat_questions, len(chat.messages)
            if not await load_or_park(self.sources, chat.tools, self.journal, chat.id, own, said, stopped=chat.stopped):
                return
        carrier = self.carrier()
        while True:
            await carrier.carry_all(self.look)
            if not self.model_next():
                return
            reply = None
            async for event in self.model_turn().take(stream, chat.instructions, chat.tool_choice, chat.settings):
                if isinstance(event, MessageDone):
                    reply = event.message
                yield event
            if once or reply is None or not reply.tool_calls:
                return

    def carrier(self) -> CallCarrier:
        """What carries the chat's calls on, for one run of the loop."""
        chat = self.chat
        return CallCarrier(
            chat.id,
            self.journal,
            chat.records,
            chat.messages,
            chat.tools,
            max_concurrency=chat.max_concurrency,
            claims_turn=chat.model is not None,
        )

    def model_turn(self) -> ModelTurn:
        """The model's next turn in the chat."""
        chat = self.chat
        if chat.model is None:
            raise TarryError("This chat has no model: pass model= to Chat (or to load_chat) to carry it on")
        return ModelTurn(
            chat.id,
            chat.model,
            self.journal,
            chat.messages,
            chat.records,
            chat.tools,
            look=self.look,
            ready=lambda: not chat.waiting and self.needs_model(),
        )

    def model_next(self) -> bool:
        """Whether the model speaks next: no call waits (the chat parks, and says so, when one does) and the last
        message is not the model's."""
        chat = self.chat
        if chat.waiting:
            waiting = sum(record.open for record in chat.records.values())
            logger.info("Chat %s parked: %d call(s) wait", chat.id, waiting, extra={"chat_id": chat.id})
            return False
        return self.needs_model()

    def needs_model(self) -> bool:
        """Whether the last message is one the model has not answered."""
        messages = self.chat.messages
        return bool(messages) and messages[-1].role != "assistant"
