"""What every adapter to a hosted provider shares: the model's name and a client made on first use."""

from __future__ import annotations

from typing import Generic, TypeVar

ClientT = TypeVar("ClientT")


class HostedModel(Generic[ClientT]):
    """A model behind a provider's SDK client, which is made on first use.

    Making the client late lets a chat be built before its key is known; a missing key then
    surfaces as an :class:`~tarry.errors.AuthenticationError` at the first request.
    """

    provider: str

    def __init__(self, model: str, client: ClientT | None) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{type(self).__name__} needs a model name, got {model!r}")
        self.model = model
        self._client = client

    @property
    def name(self) -> str:
        """``"provider:model"``, as a persisted chat records it."""
        return f"{self.provider}:{self.model}"

    @property
    def client(self) -> ClientT:
        """The SDK client, made on first use."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> ClientT:
        raise NotImplementedError
