"""Notices as signed webhooks, per the Standard Webhooks specification (``pip install 'tarry[notify]'``).

Each delivery is one ``POST`` of JSON ``{"type": "question.<event>", "timestamp": ..., "data": <the question>}``
with the headers ``webhook-id`` (the delivery's id: the same on every attempt, so the receiver drops a repeat),
``webhook-timestamp`` and ``webhook-signature``, made with the ``standardwebhooks`` package. A receiver verifies it
with ``standardwebhooks.Webhook(secret).verify(body, headers)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

try:
    from standardwebhooks import Webhook
except ImportError:  # pragma: no cover - depends on the installation
    raise ImportError("tarry.jobs.webhook needs standardwebhooks: pip install 'tarry[notify]'") from None

from tarry.notices import Delivery

__all__ = ["WebhookError", "WebhookSender", "webhook_body"]


class WebhookError(Exception):
    """The endpoint did not take a webhook (an answer outside 2xx); the delivery is tried again later."""


def webhook_body(delivery: Delivery) -> bytes:
    """The JSON body of ``delivery``'s webhook: its event's type, when it happened, and the question as the JSON API
    shows it."""
    payload = {
        "type": f"question.{delivery.event}",
        "timestamp": delivery.noticed_at.isoformat(),
        "data": delivery.question.to_dict(),
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookSender:
    """Sends every notice to ``url`` as a Standard Webhooks ``POST`` signed with ``secret`` (``whsec_…``, base64).

    To rotate secrets, give several, newest first: each attempt is signed with every one (the
    ``webhook-signature`` header lists one signature per secret, as the specification allows), so the receiver
    verifies with either while it moves to the newest; then drop the old one. ``channel`` names the endpoint's
    deliveries (``"webhook"``): give two endpoints two names. An answer outside 2xx, or no answer within
    ``timeout`` seconds, fails the attempt.
    """

    endpoint = True
    """One delivery of each notice, to the URL, with no recipient
    ([`goes_to_endpoint`][tarry.notices.goes_to_endpoint])."""

    def __init__(
        self,
        url: str,
        secret: str | Sequence[str],
        *,
        channel: str = "webhook",
        timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        secrets = [secret] if isinstance(secret, str) else list(secret)
        if not secrets:
            raise ValueError("A webhook sender needs at least one secret")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"A webhook's URL must be http:// or https://, got {url!r}")
        self.url = url
        self._signers = [Webhook(given) for given in secrets]
        self._channel = channel
        self._timeout = timeout
        self._client = client
        self._pools: list[httpx.AsyncClient] = []
        self._turn = 0

    @property
    def channel(self) -> str:
        """The channel's name, as deliveries name it."""
        return self._channel

    def headers(self, delivery: Delivery, body: bytes, at: datetime | None = None) -> dict[str, str]:
        """The Standard Webhooks headers of ``body`` sent for ``delivery`` at ``at`` (default: now)."""
        # The real time, not tarry.clock's: the receiver checks the timestamp against its own clock.
        at = datetime.now(UTC) if at is None else at
        signatures = " ".join(signer.sign(delivery.id, at, body) for signer in self._signers)
        return {
            "content-type": "application/json",
            "webhook-id": delivery.id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signatures,
        }

    async def send(self, delivery: Delivery) -> None:
        """POST the delivery's webhook; raise [`WebhookError`][tarry.jobs.webhook.WebhookError] (or httpx's error)
        unless the endpoint answers 2xx."""
        body = webhook_body(delivery)
        client = self._client_for_loop()
        response = await client.post(self.url, content=body, headers=self.headers(delivery, body))
        if not response.is_success:
            raise WebhookError(f"{self.url} answered {response.status_code}: {response.text[:200]}")

    def _client_for_loop(self) -> httpx.AsyncClient:
        """The client given, else the next of the sender's own, in turn."""
        if self._client is not None:
            return self._client
        if not self._pools:
            self._pools = [httpx.AsyncClient(timeout=self._timeout, limits=_POOL_LIMITS) for _ in range(_POOLS)]
        self._turn = (self._turn + 1) % _POOLS
        return self._pools[self._turn]

    async def aclose(self) -> None:
        """Close the HTTP connections it keeps (not those of a client it was given)."""
        pools, self._pools = self._pools, []
        for pool in pools:
            await pool.aclose()


# httpcore's pool looks at every connection it holds each time it places a request, so one pool of many
# connections costs more per request the more it holds: several small pools keep that look short (one worker sent
# 737 webhooks/s through one pool of 64 and 1,150-1,380 through 8 pools of 2, to a receiver on 127.0.0.1).
_POOLS = 8
_POOL_LIMITS: Any = httpx.Limits(max_connections=2, max_keepalive_connections=2)
