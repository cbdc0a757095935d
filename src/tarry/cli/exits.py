"""The exit statuses of ``tarry`` that scripts can rely on, and which error gets which."""

from __future__ import annotations

import sys
from enum import IntEnum

from tarry.errors import (
    AmbiguousIdError,
    ChatNotFoundError,
    CorruptStateError,
    InvalidAnswerError,
    NotAllowedError,
    NotDecidableError,
    NotRespondableError,
    ProposalChangedError,
    QuestionExpiredError,
    StoreError,
    StoreSchemaError,
    ToolCallRunningError,
    UnknownDeliveryError,
    UnknownGrantError,
    UnknownQuestionError,
)
from tarry.specs import SpecError


class Exit(IntEnum):
    """What a ``tarry`` command's exit status means (documented in docs/cli.md)."""

    OK = 0
    """Done: the decision or cancellation was recorded, or the listing was printed."""
    FAILED = 1
    """Any other error (the message on stderr says what)."""
    USAGE = 2
    """The command line was wrong (argparse's status), or a ``module:name`` it gives names nothing importable."""
    TOO_LATE = 3
    """Someone else decided the question first (or the chat's cancellation was already asked for)."""
    EXPIRED = 4
    """The question's time to live passed before anyone decided it."""
    INVALID = 5
    """The answer does not fit the question (or a result was given for what is not a call's approval); each field's
    problem is on stderr."""
    UNKNOWN = 6
    """No question, chat or grant has the id (or, for an id's prefix, several have it)."""
    DATABASE = 7
    """The database cannot be used: unreachable, missing the schema, or holding unreadable rows."""
    RUNNING = 8
    """The question's call is running right now, so it cannot be declined."""
    NOT_ALLOWED = 9
    """The approval's policy refused the person (``--as``): not allowed to decide it, or already approved."""
    TAMPERED = 10
    """``tarry history --verify``: the audit trail is not as tarry wrote it (a row changed, removed or inserted)."""
    CHANGED = 11
    """``tarry approve --seen`` or ``tarry respond --seen``: the call's arguments changed since the digest given was
    printed (with ``--chat ID --all``: one question's did, or a question was asked since); nothing was recorded, and
    stderr says what they are now."""
    INTERRUPTED = 130
    """Ctrl-C: the chat is parked in the database and can be resumed."""


_BY_ERROR: tuple[tuple[type[BaseException], Exit], ...] = (
    (SpecError, Exit.USAGE),
    (InvalidAnswerError, Exit.INVALID),
    (NotRespondableError, Exit.INVALID),
    (UnknownQuestionError, Exit.UNKNOWN),
    (UnknownGrantError, Exit.UNKNOWN),
    (UnknownDeliveryError, Exit.UNKNOWN),
    (AmbiguousIdError, Exit.UNKNOWN),
    (ChatNotFoundError, Exit.UNKNOWN),
    (QuestionExpiredError, Exit.EXPIRED),
    (ToolCallRunningError, Exit.RUNNING),
    (NotAllowedError, Exit.NOT_ALLOWED),
    (ProposalChangedError, Exit.CHANGED),
    (CorruptStateError, Exit.DATABASE),
    (StoreError, Exit.DATABASE),
)


def exit_status(error: BaseException) -> Exit:
    """The exit status for an error a command raised.

    Errors are matched by class (the first matching entry of the table wins), so subclasses
    of the listed errors get their parent's status; a whole turn stopped by one question
    ([`NotDecidableError`][tarry.errors.NotDecidableError]) gets its reason's status, else 1.
    Every [`StoreError`][tarry.errors.StoreError] (unreachable, wrong schema, full, read-only,
    damaged) and any SQLAlchemy error mean the database is unusable.
    """
    if isinstance(error, NotDecidableError) and error.reason is not None:  # a turn stopped by one question
        return exit_status(error.reason)
    for kind, status in _BY_ERROR:
        if isinstance(error, kind):
            return status
    if any(kind.__module__.startswith("sqlalchemy") for kind in type(error).__mro__):
        return Exit.DATABASE
    return Exit.FAILED


def fail(error: BaseException) -> int:
    """Print what went wrong to stderr and return the error's exit status."""
    status = exit_status(error)
    if isinstance(error, InvalidAnswerError):
        print("tarry: invalid answer", file=sys.stderr)
        for name, problem in error.errors.items():
            print(f"  {name}: {problem}", file=sys.stderr)
    elif status is Exit.DATABASE:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"tarry: the database cannot be used: {detail}", file=sys.stderr)
        if not isinstance(error, StoreSchemaError):  # whose message says what to do with the schema
            print("  (check --url / TARRY_DATABASE_URL)", file=sys.stderr)
    else:
        print(f"tarry: {error}", file=sys.stderr)
    return int(status)


def database_problem(url: str | None, *, creates: bool = False) -> str | None:
    """What makes ``url`` (``--url``, else ``TARRY_DATABASE_URL``, else the default) unusable before it is opened:
    it is no database URL, or (unless the command ``creates`` the database) it names a SQLite file that does
    not exist, which a command that only reads or decides must not leave behind; else ``None``."""
    from pathlib import Path

    from tarry.store.engine import database_url

    try:
        resolved = database_url(url)
    except ValueError as error:
        return str(error)
    if creates or resolved.get_backend_name() != "sqlite" or resolved.query.get("uri") == "true":
        return None
    if not resolved.database or Path(resolved.database).exists():
        return None
    path = Path(resolved.database)
    return f"no database file at {path.absolute()}; `tarry db upgrade --url sqlite:///{path}` creates one"


def refuse_database(url: str | None, *, creates: bool = False) -> int | None:
    """Print why ``url`` cannot be used and return exit status 7; ``None`` when nothing is wrong with it yet."""
    problem = database_problem(url, creates=creates)
    if problem is None:
        return None
    print(f"tarry: the database cannot be used: {problem}", file=sys.stderr)
    return int(Exit.DATABASE)
