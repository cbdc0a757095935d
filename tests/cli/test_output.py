"""What the CLI shows of a URL, and which exit status an error gets."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from tarry.cli.exits import Exit, exit_status
from tarry.cli.output import shown_url
from tarry.errors import (
    ChatNotFoundError,
    InvalidAnswerError,
    QuestionExpiredError,
    StoreFullError,
    StoreSchemaError,
    StoreUnavailableError,
    TarryError,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://bücher.example/login?next=/home", "https://xn--bcher-kva.example/login?next=/home"),
        ("https://аpple.com/", "https://xn--pple-43d.com/"),  # a Cyrillic а
        ("https://user@Bücher.example:8443/x#top", "https://user@xn--bcher-kva.example:8443/x#top"),
        ("https://example.com/ä", "https://example.com/ä"),
        ("https://💩.example/", "https://xn--ls8h.example/"),  # refused by IDNA 2003, still shown in ASCII
        ("mailto:someone@example.com", "mailto:someone@example.com"),
    ],
)
def test_a_url_is_shown_with_its_host_in_punycode(url: str, shown: str) -> None:
    assert shown_url(url) == shown


class StrictAnswerError(InvalidAnswerError):
    """A made-up subclass of a mapped error."""


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidAnswerError({"time": "a value is required"}), Exit.INVALID),
        (StrictAnswerError({"time": "too early"}), Exit.INVALID),
        (ChatNotFoundError("no chat"), Exit.UNKNOWN),
        (QuestionExpiredError("too late"), Exit.EXPIRED),
        (StoreSchemaError("run tarry db upgrade"), Exit.DATABASE),
        (StoreUnavailableError("try again"), Exit.DATABASE),
        (StoreFullError("free space"), Exit.DATABASE),
        (OperationalError("SELECT 1", {}, Exception("no such table")), Exit.DATABASE),
        (TarryError("something else"), Exit.FAILED),
        (RuntimeError("a bug"), Exit.FAILED),
    ],
)
def test_errors_map_to_exit_statuses_by_class(error: BaseException, status: Exit) -> None:
    assert exit_status(error) == status
