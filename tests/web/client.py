"""A Starlette TestClient on the inbox app, and checks of problem documents, for the tests that need no browser."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tarry.questions import Question
from tarry.store import Store
from tarry.web import create_app

TOKEN = "api-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


class Inbox:
    """A TestClient on the inbox of one database, holding one event loop for the store."""

    def __init__(self, url: str, base: str = "http://127.0.0.1", **options: Any) -> None:
        self.url = url
        self.store = Store(url)
        self.answered: list[Question] = []
        self.hooked: list[str] = []
        self.store.decision_hooks.append(lambda decided: self.hooked.append(decided.id))
        options.setdefault("on_answer", self.answered.append)
        if "authorize" not in options:
            options.setdefault("token", TOKEN)
        self.app = create_app(self.store, **options)
        self.client = TestClient(self.app, base_url=base)


def problem(response: Any, status: int) -> dict[str, Any]:
    """The body of ``response``, checked to be a problem document of ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body
