"""Reading the user's lines without blocking the event loop, so a prompt can give way.

A prompt for a question races a look at the database: when someone answers the question
elsewhere first, the read is cancelled. The terminal's own line editing (canonical mode)
does the editing, so no line-editing library is needed.
"""

from __future__ import annotations

import asyncio
import os
import sys


class LineReader:
    """Lines of stdin, read as they arrive on the event loop; ``readline()`` can be cancelled."""

    def __init__(self) -> None:
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._buffer = b""
        self._fd = sys.stdin.fileno()
        self._watching = False

    def start(self) -> None:
        """Start reading stdin (a terminal or a pipe; a regular file is read whole at once)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(self._fd, self._readable)
            self._watching = True
        except (PermissionError, OSError):  # epoll refuses regular files; they are readable at once anyway
            self._take(sys.stdin.buffer.read())
            self._take(b"")

    def stop(self) -> None:
        """Stop reading stdin."""
        if self._watching:
            asyncio.get_running_loop().remove_reader(self._fd)
            self._watching = False

    def _readable(self) -> None:
        self._take(os.read(self._fd, 65536))

    def _take(self, data: bytes) -> None:
        if not data:
            if self._buffer:
                self._lines.put_nowait(self._buffer.decode(errors="replace"))
                self._buffer = b""
            self._lines.put_nowait(None)
            self.stop()
            return
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for line in complete:
            self._lines.put_nowait(line.decode(errors="replace").rstrip("\r"))

    async def readline(self, prompt: str) -> str | None:
        """Show ``prompt`` and return the next line without its newline; ``None`` at end of input."""
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = await self._lines.get()
        if line is None:
            self._lines.put_nowait(None)  # every later read sees the end too
            sys.stdout.write("\n")
        elif not sys.stdin.isatty():
            sys.stdout.write(line + "\n")  # piped input: echo it, so the output reads like the session
        return line
