"""The exceptions tarry raises. Every one is a [`TarryError`][tarry.errors.TarryError]."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class TarryError(Exception):
    """Base class of every error tarry raises on purpose."""


class BridgeError(TarryError):
    """A chat parked by a bridge (``tarry.bridges``) was asked what its bridge cannot do: to go on with a new
    message after its foreign run went on, say."""


class TarryWarning(UserWarning):
    """Something tarry can work with but that is likely a mistake, such as a tool without a description."""


class PendingToolCallsError(TarryError):
    """A new user message was sent while tool calls still wait for a result."""


class ToolCallRunningError(TarryError):
    """A question was declined while its tool call is running right now."""


class UnknownQuestionError(TarryError, ValueError):
    """The question id names no question of this chat or store."""


class UnknownGrantError(TarryError, ValueError):
    """The grant id names no standing grant of this store."""


class UnknownDeliveryError(TarryError, ValueError):
    """The delivery id names no delivery of a notice in this store."""


class AmbiguousIdError(TarryError, ValueError):
    """An id prefix that several questions (or chats) share; the message lists them."""


class InvalidAnswerError(TarryError, ValueError):
    """An answer the question cannot take; ``errors`` maps each field name to what was wrong."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        details = "; ".join(f"{name}: {problem}" for name, problem in self.errors.items())
        super().__init__(f"Invalid answer: {details}")


class InvalidArgumentsError(TarryError, ValueError):
    """The model's arguments do not fit the tool's parameters."""


class ToolCallError(TarryError):
    """Raise from a tool to end its call with an error result carrying ``details`` beside the message.

    The call's result is ``{"error": message, **details}`` (details are JSON values), where any
    other exception gives ``{"error": "The <tool> call raised <Type>: <message>"}``. Front ends
    read the details: the MCP server's [`tarry.mcp.ProtocolError`][tarry.mcp.ProtocolError] is one.
    """

    def __init__(self, message: str, **details: Any) -> None:
        if not isinstance(message, str) or not message.strip():
            raise ValueError(f"A tool call error needs a message, got {message!r}")
        if "error" in details:
            raise ValueError("A tool call error's details cannot be named 'error': that key holds the message")
        super().__init__(message)
        self.details = details


class NotRespondableError(TarryError, ValueError):
    """A result given in a tool's place (``respond``) for a question that is not the approval a call waits on before
    it runs: a form, a link, a question asked by running tool code or by a task, or a chat's own question.

    The message says which; nothing is recorded, not even on the audit trail.
    """


class ProposalChangedError(TarryError):
    """An approval said which arguments it saw (``seen``, their digest), and the call's approval proposes others now:
    someone changed them since. Nothing is recorded; ``proposal`` holds the arguments proposed now, and ``digest``
    their digest, to show the person before they decide again."""

    def __init__(self, message: str, *, proposal: Mapping[str, Any] | None, digest: str | None) -> None:
        super().__init__(message)
        self.proposal = None if proposal is None else dict(proposal)
        self.digest = digest


class QuestionExpiredError(TarryError):
    """The question's time to live passed before anyone decided it."""


class ClaimLostError(TarryError):
    """This process's lease on a call or a chat ran out and another process took the work over."""


class ChatNotFoundError(TarryError, LookupError):
    """No chat has this id."""


class MissingToolsError(TarryError):
    """A waiting or decided call names a tool the chat was not given; ``names`` lists them.

    Nothing is recorded: load the chat again with those tools (or cancel it) to carry it on.
    """

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


class CorruptStateError(TarryError):
    """A saved record cannot be read back; the message names the record.

    ``chat_id`` and ``call_id`` (the provider's id of the tool call) name where it lies, when known.
    """

    def __init__(self, message: str, *, chat_id: str | None = None, call_id: str | None = None) -> None:
        super().__init__(message)
        self.chat_id = chat_id
        self.call_id = call_id


class StoreError(TarryError):
    """The database underneath a store failed; the message says what happened and what to do."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached or opened."""


class StoreSchemaError(StoreError):
    """The database has no tarry schema, or one older or newer than this tarry uses."""


class StoreFullError(StoreError):
    """The database (or the disk under it) is full; the failed write saved nothing."""


class StoreReadOnlyError(StoreError):
    """The database refuses writes: a file opened read-only, a read-only connection or server."""


class StoreCorruptError(StoreError):
    """The database file is damaged or is not a database at all."""


class StoreConflictError(StoreError):
    """The database ended a write to break a deadlock (or a serialization conflict) with another transaction; the
    write saved nothing, and trying it again is safe."""


class ProviderError(TarryError):
    """A model provider failed to answer; ``status`` is its HTTP status when it sent one."""

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class AuthenticationError(ProviderError):
    """The provider refused the credentials."""


class RateLimitError(ProviderError):
    """The provider asked us to slow down; ``retry_after`` is the seconds it named, if any."""

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status)
        self.retry_after = retry_after


class ContextLengthError(ProviderError):
    """The transcript is longer than the model can read."""


class NotAllowedError(TarryError):
    """A decision its question's approval policy refuses: a person who may not decide it, or one who already approved.

    Nothing is decided; the refused attempt is recorded in the audit trail. The web API answers 403.
    """


class NotDecidableError(TarryError):
    """A question that stopped approving a chat's whole turn at once; nothing is recorded for any question of the turn.

    ``question_id`` names the question, ``reason`` is the refusal approving it alone would get
    ([`QuestionExpiredError`][tarry.errors.QuestionExpiredError], [`NotAllowedError`][tarry.errors.NotAllowedError]),
    or ``None`` for what only the whole turn cannot do: a form to fill in, a link to open, or an approval whose
    policy needs more people, which this approval would only count.
    """

    def __init__(self, message: str, question_id: str, reason: TarryError | None = None) -> None:
        super().__init__(message)
        self.question_id = question_id
        self.reason = reason
