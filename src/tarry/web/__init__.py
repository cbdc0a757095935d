"""The web inbox and JSON API for what chats wait on (``pip install 'tarry[web]'``).

``create_app(store)`` returns an ASGI app: the inbox page, where people answer questions,
approve or decline calls and watch working tasks, and the JSON API under ``/api`` with its
OpenAPI schema at ``/api/openapi.json``. ``tarry serve`` runs it on 127.0.0.1.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
    import jinja2  # noqa: F401
    import python_multipart  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"tarry.web needs the web extra: pip install 'tarry[web]' (missing: {error.name})") from error

from tarry.web.access import TOKEN_HOLDER, Authorize, ChatRef, Identify, Shown
from tarry.web.app import create_app
from tarry.web.decisions import OnAnswer
from tarry.web.identity import ProxyIdentity, Users, hash_token, remember_peer
from tarry.web.oauth import serve_callback

__all__ = [
    "TOKEN_HOLDER",
    "Authorize",
    "ChatRef",
    "Identify",
    "OnAnswer",
    "ProxyIdentity",
    "Shown",
    "Users",
    "create_app",
    "hash_token",
    "remember_peer",
    "serve_callback",
]
