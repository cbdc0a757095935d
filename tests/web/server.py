"""The inbox served by uvicorn on 127.0.0.1, in a thread with its own event loop and store."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn

from tarry.questions import Question
from tarry.store import Store
from tarry.web import Authorize, create_app
from tarry.web.access import Identify

TOKEN = "test-login-token-0123456789"


class LiveServer:
    """A real uvicorn server for the inbox of the database at ``url``; records ``on_answer`` calls.

    With ``authorize`` the app uses it instead of the login token, and ``identify`` (with it) says who decides; with
    ``link_secret`` it serves signed links.
    """

    def __init__(
        self,
        url: str,
        token: str = TOKEN,
        authorize: Authorize | None = None,
        identify: Identify | None = None,
        link_secret: str | None = None,
    ) -> None:
        self.url = url
        self.link_secret = link_secret
        self.token = token
        self.authorize = authorize
        self.identify = identify
        self.answered: list[Question] = []
        self.hooked: list[Question] = []
        self._server: uvicorn.Server | None = None
        self._failure: BaseException | None = None
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._run, name="tarry-web-test-server", daemon=True)

    @property
    def login(self) -> str:
        """The login link ``tarry serve`` would print."""
        return f"{self.base}/login?token={self.token}"

    @property
    def auth(self) -> dict[str, str]:
        """Headers for API calls from scripts."""
        return {"Authorization": f"Bearer {self.token}"}

    def _run(self) -> None:
        async def main() -> None:
            async with Store(self.url) as store:
                store.decision_hooks.append(self.hooked.append)
                identity: dict[str, Any] = (
                    {"authorize": self.authorize, "identify": self.identify}
                    if self.authorize is not None
                    else {"token": self.token}
                )
                app = create_app(store, **identity, on_answer=self.answered.append, link_secret=self.link_secret)
                self._server = uvicorn.Server(
                    uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
                )
                await self._server.serve(sockets=[self._socket])

        try:
            asyncio.run(main())
        except BaseException as error:  # reported by start()
            self._failure = error

    def start(self) -> LiveServer:
        """Start serving; returns once the server accepts connections (or raises after 30 s)."""
        self._thread.start()
        deadline = time.monotonic() + 30
        while not (self._server is not None and self._server.started):
            if self._failure is not None or not self._thread.is_alive():
                raise RuntimeError(f"The test server did not start: {self._failure!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("The test server did not start within 30 s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the test server did not stop"

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
