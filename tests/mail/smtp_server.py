"""A real SMTP server (aiosmtpd) for the mail tests, run as a process of its own: saves each message it takes.

``python -m tests.mail.smtp_server DIRECTORY [USER:PASSWORD]``: listens on 127.0.0.1 (a free port), writes the port to
``DIRECTORY/port`` once it accepts connections, and saves each message's bytes as ``DIRECTORY/NNNN.eml``
(written under another name, then renamed, so a reader never sees half a message).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


class Saving:
    """An aiosmtpd handler that keeps each message in a file of its own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.numbers = itertools.count(1)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        number = next(self.numbers)
        partial = self.directory / f"{number:04d}.part"
        partial.write_bytes(envelope.original_content or envelope.content)
        os.replace(partial, self.directory / f"{number:04d}.eml")
        return "250 Message accepted for delivery"


def authenticator(login: str, password: str) -> Any:
    """An aiosmtpd authenticator that takes only ``login`` with ``password``."""

    def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        given = isinstance(data, LoginPassword) and (data.login, data.password) == (login.encode(), password.encode())
        return AuthResult(success=given)

    return check


async def main(directory: Path, login: str | None = None) -> None:
    """Serve until SIGTERM; with ``login`` (``user:password``), only to that user, logged in."""
    handler = Saving(directory)
    options: dict[str, Any] = {}
    if login is not None:
        user, _, password = login.partition(":")
        # Plain text on loopback only: the test checks that the sender logs in, not TLS.
        warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS")
        options = {"authenticator": authenticator(user, password), "auth_required": True, "auth_require_tls": False}
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(handler, hostname="tarry-test-smtp", **options), sock=listening)
    (directory / "port.part").write_text(str(listening.getsockname()[1]))
    os.replace(directory / "port.part", directory / "port")
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    await stopped.wait()
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
