"""The mail tests' SMTP server process, and reading what it received."""

from __future__ import annotations

import email
import email.policy
import re
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?P<title>Approve|Decline|Answer): (?P<url>\S+/links/\S+)")


class Mailbox:
    """A real SMTP server (aiosmtpd) in its own OS process on 127.0.0.1, saving each message under ``directory``;
    with ``login`` (``user:password``) it takes mail only from that user, logged in."""

    def __init__(self, directory: Path, login: str | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tests.mail.smtp_server", str(directory), *([login] if login else [])]
        self.process = subprocess.Popen(command, cwd=ROOT)
        self._wait(lambda: (directory / "port").exists(), "the SMTP server to listen")
        self.port = int((directory / "port").read_text())

    def _wait(self, ready: Any, what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"The SMTP server exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Waited {seconds} s for {what}")
            time.sleep(0.02)

    def messages(self, count: int) -> list[EmailMessage]:
        """The first ``count`` messages received, in order, waiting for them up to 30 s."""
        self._wait(lambda: len(list(self.directory.glob("*.eml"))) >= count, f"{count} message(s)")
        files = sorted(self.directory.glob("*.eml"))[:count]
        return [email.message_from_bytes(path.read_bytes(), policy=email.policy.default) for path in files]  # type: ignore[misc]

    def received(self) -> int:
        """How many messages the server has saved so far."""
        return len(list(self.directory.glob("*.eml")))

    def close(self) -> None:
        """Stop the server process and wait for it."""
        self.process.terminate()
        self.process.wait(timeout=30)


def bodies(message: EmailMessage) -> tuple[str, str]:
    """The message's plain-text and HTML bodies."""
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None, "the message has a text and an HTML part"
    return text.get_content(), html.get_content()


def links(message: EmailMessage) -> dict[str, str]:
    """The one-click links of a message's plain text, by title (``Approve``, ``Decline``, ``Answer``)."""
    text, _ = bodies(message)
    return {match["title"]: match["url"] for match in LINK.finditer(text)}
