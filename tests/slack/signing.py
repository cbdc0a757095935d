"""Interaction requests as Slack sends them: ``payload=<JSON>`` form-encoded, signed v0 with the signing secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0TEAM"


def signed(payload: dict[str, Any], *, secret: str = SIGNING_SECRET, at: float | None = None) -> dict[str, Any]:
    """Keyword arguments for an httpx ``post``: the body and the headers Slack sends, signed at ``at`` (now)."""
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": f"v0={digest}",
    }
    return {"content": body.encode(), "headers": headers}


def _user(user: str) -> dict[str, Any]:
    return {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM}


def click(action_id: str, question_id: str, *, user: str, channel: str, ts: str) -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` clicked the button ``action_id`` on the message at ``channel``/``ts``."""
    return {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "example"},
        "user": _user(user),
        "api_app_id": "A0APP",
        "token": "verification-token-unused",
        "container": {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False},
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "channel": {"id": channel, "name": "directmessage"},
        "message": {"type": "message", "ts": ts, "text": "…"},
        "response_url": "https://hooks.slack.com/actions/T0TEAM/1/abc",
        "actions": [
            {
                "action_id": action_id,
                "block_id": f"tarry:{question_id}",
                "value": question_id,
                "type": "button",
                "action_ts": "1764880001.000001",
            }
        ],
    }


def submit(view: dict[str, Any], values: dict[str, Any], *, user: str) -> dict[str, Any]:
    """A ``view_submission`` payload: ``user`` submitted the modal ``view`` (as views.open sent it) with
    ``values`` (``view.state.values``: block id → action id → the element's state)."""
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "example"},
        "user": _user(user),
        "api_app_id": "A0APP",
        "token": "verification-token-unused",
        "trigger_id": "13345224609.738474920.8088930838d88f008e1",
        "view": {
            "id": "V0MODAL",
            "team_id": TEAM,
            "type": "modal",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "blocks": view["blocks"],
            "state": {"values": values},
            "hash": "1.abc",
        },
        "response_urls": [],
    }
