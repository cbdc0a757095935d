"""docs/notifications-email.md's example, run as a program against a real SMTP server and ``tarry serve``
(with ``TARRY_LINK_SECRET``); its mail's link is then followed and confirmed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tarry import Principal
from tests.mail.mailbox import ROOT, Mailbox, bodies, links
from tests.web.tools import question

PAGE = ROOT / "docs" / "notifications-email.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SECRET = "the-docs-example-link-secret"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``tarry serve`` with ``TARRY_LINK_SECRET`` on a SQLite file: the database URL and the inbox's base URL."""
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    process = subprocess.Popen(
        [sys.executable, "-m", "tarry.cli", "serve", "--url", url, "--port", "0"],
        cwd=ROOT,
        env={**os.environ, "TARRY_LINK_SECRET": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        printed: list[str] = []
        deadline = time.monotonic() + 60
        while not any("signed links of emails" in line for line in printed):
            assert time.monotonic() < deadline, f"tarry serve did not start: {printed}"
            line = process.stdout.readline()
            assert line, f"tarry serve ended early (status {process.poll()}): {printed}"
            printed.append(line)
        [base] = re.findall(r"(http://127\.0\.0\.1:\d+)/login\?token=", "".join(printed))
        yield url, base
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_pages_example_mails_a_link_that_approves_once_confirmed(
    served: tuple[str, str], mailbox: Mailbox, tmp_path: Path
) -> None:
    url, base = served
    program = tmp_path / "example.py"
    blocks = [match.group(1) for match in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]
    assert blocks, "the page has its example"
    program.write_text("\n".join([*blocks, "print(question_id)"]), encoding="utf-8")
    environment = {
        **os.environ,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(mailbox.port),
        "INBOX_URL": base,
        "TARRY_LINK_SECRET": SECRET,
        "TARRY_DATABASE_URL": url,
    }
    ran = subprocess.run(
        [sys.executable, str(program)], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    question_id = ran.stdout.strip()

    [message] = mailbox.messages(1)
    assert message["Subject"] == "Approve refund?"
    assert message["To"] == "ada@example.com"
    assert '"order": "A17"' in bodies(message)[0]
    approve = links(message)["Approve"]
    assert approve.startswith(f"{base}/links/")
    with httpx.Client() as client:
        page = client.get(approve)
        assert page.status_code == 200
        assert question(url, question_id).decision is None
        [token] = re.findall(r'name="link_csrf" value="([^"]+)"', page.text)
        assert client.post(approve, data={"link_csrf": token}).status_code == 200
    decided = question(url, question_id)
    assert (decided.decision, decided.decided_by, decided.channel) == (
        "accept",
        Principal("u-ada", "Ada Lovelace"),
        "email",
    )
