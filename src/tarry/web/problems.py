"""Errors as ``application/problem+json`` (RFC 9457), and their place in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

PROBLEM_TYPE = "application/problem+json"
TITLES = {
    400: "Invalid request",
    401: "Login required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Already decided",
    410: "Expired",
    413: "Request too large",
    415: "Unsupported media type",
    500: "Internal error",
}


class Problem(Exception):
    """An error the API reports as a problem document."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title or TITLES.get(status, "Error")
        self.detail = detail
        self.extra = extra

    def response(self, request: HTTPConnection) -> Response:
        """The problem as a response."""
        body = {"type": "about:blank", "title": self.title, "status": self.status, "detail": self.detail}
        body["instance"] = request.url.path
        body.update(self.extra)
        headers = {"WWW-Authenticate": 'Bearer realm="tarry"'} if self.status == 401 else None
        return JSONResponse(body, status_code=self.status, media_type=PROBLEM_TYPE, headers=headers)


def problem_schema() -> dict[str, Any]:
    """The JSON schema of a problem document."""
    return {
        "title": "Problem",
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
            "errors": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "For 400: each wrong field (or request part) and what was wrong with it.",
            },
            "question_id": {"type": "string"},
        },
    }


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses."""
    return {
        status: {
            "description": TITLES.get(status, "Error"),
            "content": {PROBLEM_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def finish_openapi(schema: dict[str, Any]) -> dict[str, Any]:
    """Put the problem schema in, and drop FastAPI's 422 responses (validation errors are 400 here)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = problem_schema()
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
    schemas = schema["components"]["schemas"]
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return schema
