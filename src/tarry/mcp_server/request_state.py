"""Signed ``requestState`` for 2026-07-28 input requests: HMAC-SHA256 over the call it belongs to.

The client echoes the state back verbatim, and it is attacker-controlled: the server trusts
only what its own key signed. The state names the stored chat of the call, the tool, the
authenticated client it was issued to, and when it stops being valid; a state signed for
another tool, presented by another client, altered, or past its time is refused
with an ``INVALID_PARAMS`` error. The retry's arguments are not used: the call's arguments are
the ones its stored chat recorded when it started, so a retry cannot change what runs. Every
process of one server must share the key (``TARRY_MCP_STATE_KEY``) so any of them accepts a
state another one issued.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Sequence

from mcp.shared.exceptions import MCPError

KEY_VARIABLE = "TARRY_MCP_STATE_KEY"
STATE_TTL = 24 * 3600
"""Seconds a request state stays valid."""
_INVALID_PARAMS = -32602


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class RequestStateSigner:
    """Seals a call's chat id into a request state and opens it again, refusing any state it did not sign.

    ``key`` (bytes, or text) defaults to ``TARRY_MCP_STATE_KEY``, else a random key that only
    this process knows (so a state does not survive a restart or reach another process).
    """

    def __init__(self, key: bytes | str | None = None, *, ttl: float = STATE_TTL) -> None:
        if key is None:
            key = os.environ.get(KEY_VARIABLE) or secrets.token_bytes(32)
        self._key = key.encode() if isinstance(key, str) else bytes(key)
        if len(self._key) < 16:
            raise ValueError("A request state key needs at least 16 bytes")
        self.ttl = ttl

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def seal(self, chat_id: str, *, tool: str, asking: Sequence[str] = (), owner: str | None = None) -> str:
        """The request state for the call whose stored chat is ``chat_id``, in the round that asks ``asking``.

        ``asking`` is the round's input keys: naming them makes each round's state differ from the
        last, as SEP-2322 has it. ``owner`` is the authenticated client the state is issued to
        (``None``: no client was authenticated); only that client may present it.
        """
        claims = {
            "chat": chat_id,
            "tool": tool,
            "asks": list(asking),
            "owner": owner,
            "until": int(time.time() + self.ttl),
        }
        body = _b64(json.dumps(claims).encode())
        return f"{body}.{self._mac(body)}"

    def open(self, state: str, *, tool: str, owner: str | None = None) -> str:
        """The chat id a state this signer sealed for ``tool`` and ``owner`` names; raises ``MCPError`` for others."""
        body, _, mac = state.partition(".")
        if not mac or not hmac.compare_digest(mac, self._mac(body)):
            raise MCPError(
                code=_INVALID_PARAMS, message="The requestState was not issued by this server or was altered"
            )
        try:
            claims = json.loads(_unb64(body))
            chat_id, bound_tool, until = claims["chat"], claims["tool"], claims["until"]
            bound_owner = claims.get("owner")  # a state sealed before states named their client names none
        except (ValueError, KeyError, TypeError) as error:  # pragma: no cover - signed by us, so well formed
            raise _refused("The requestState cannot be read") from error
        if bound_tool != tool:
            raise MCPError(
                code=_INVALID_PARAMS, message=f"The requestState belongs to the tool {bound_tool!r}, not {tool!r}"
            )
        if bound_owner != owner:
            raise _refused("The requestState was issued to another client")
        if until < time.time():
            raise _refused("The requestState has expired")
        return str(chat_id)


def _refused(why: str) -> MCPError:
    return MCPError(code=_INVALID_PARAMS, message=why)
