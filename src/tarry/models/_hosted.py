"""What every adapter to a hosted provider shares: the model's name and SDK clients made on first use."""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Generic, TypeVar

from tarry.errors import TarryError

ClientT = TypeVar("ClientT")


class HostedModel(Generic[ClientT]):
    """A model behind a provider's SDK client, which is made on first use, one per event loop.

    Making the client late lets a chat be built before its key is known; a missing key then
    surfaces as an [`AuthenticationError`][tarry.errors.AuthenticationError] at the first request.

    An SDK client's connection pool belongs to the event loop that first used it, so one
    adapter shared by threads that each run their own loop (a Celery worker with
    ``--pool threads``, the sync twins) makes a client for each loop; a client is dropped
    with its loop. A client passed in as ``client=`` is the caller's: it is used on one
    event loop only, and using it from another raises [`TarryError`][tarry.errors.TarryError].
    """

    provider: str

    def __init__(self, model: str, client: ClientT | None) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{type(self).__name__} needs a model name, got {model!r}")
        self.model = model
        self._given = client
        self._given_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientT] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``"provider:model"``, as a persisted chat records it."""
        return f"{self.provider}:{self.model}"

    @property
    def client(self) -> ClientT:
        """The SDK client of the running event loop, made on first use there."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise TarryError(f"{type(self).__name__}.client is used inside a running event loop") from None
        with self._lock:
            if self._given is not None:
                return self._given_client(loop)
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = self._make_client()
            return client

    def _given_client(self, loop: asyncio.AbstractEventLoop) -> ClientT:
        assert self._given is not None
        owner = self._given_loop() if self._given_loop is not None else None
        if owner is None or owner.is_closed():
            self._given_loop = weakref.ref(loop)
        elif owner is not loop:
            raise TarryError(
                f"{self.name}: the client passed as client= is in use on another event loop (another thread);"
                " pass no client= to get one client per event loop, or make one adapter per thread"
            )
        return self._given

    def _make_client(self) -> ClientT:
        raise NotImplementedError
