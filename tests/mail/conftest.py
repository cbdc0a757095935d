"""The mail tests' fixtures: the SMTP server process, and the web tests' browser and databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mail.mailbox import Mailbox
from tests.web.conftest import any_database, browser, context, database_url  # noqa: F401 (fixtures used here)


@pytest.fixture
def mailbox(tmp_path: Path) -> Iterator[Mailbox]:
    """A real SMTP server in its own process, saving what it receives under the test's directory."""
    server = Mailbox(tmp_path / "mail")
    try:
        yield server
    finally:
        server.close()
