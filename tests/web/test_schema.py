"""schemathesis against the API's OpenAPI schema, on a live server: no input makes it fail with a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, setup


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, list[str]]]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('schema')) / 'inbox.db'}"
    setup(url)
    chat = park(
        url,
        call("refund", order="A1", amount=1),
        call("book_table", restaurant="Roma"),
        call("confirm", ttl=3600),
        call("visit", url="https://example.com/sign-in"),
        call("render", pages=3),
    )
    ids = [asked.id for asked in pending(url, chat)]
    with LiveServer(url) as server:
        yield server, ids


CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance, status_code_conformance]


def test_no_generated_request_fails_with_a_server_error(served: tuple[LiveServer, list[str]]) -> None:
    # Hypothesis drives each operation's strategy here (schemathesis's pytest plugin does not run on pytest 9).
    server, ids = served
    api = schemathesis.openapi.from_url(f"{server.base}/api/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) == 14  # with GET /api/deliveries, POST /api/deliveries/{delivery_id}/retry
    # and the three of /api/grants
    sent: list[str] = []

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            sent.append(case.operation.label)
            case.call_and_validate(headers=server.auth, checks=CHECKS)
            if "question_id" in (case.path_parameters or {}):
                # The same body on a real question, so the generated values reach the answer checks.
                case.path_parameters["question_id"] = ids[len(repr(case.body)) % len(ids)]
                case.call_and_validate(headers=server.auth, checks=CHECKS)

        check()
    assert len(sent) > 6 * 10, "hypothesis generated too few requests"
