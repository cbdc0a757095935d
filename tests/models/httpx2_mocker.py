"""A respx mocker for ``httpx2`` (the fork of httpx the provider SDKs send through), in a module of its own.

respx keeps its mockers by name, once per process: this class must be defined once, so the tests that need it
(tests/models' fixtures, the Agents SDK bridge's runs) import it from here, never from a conftest.
"""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
from respx.mocks import AbstractRequestMocker


class HTTPX2Mocker(AbstractRequestMocker):
    """Patches httpx2's transports so respx routes answer the SDKs' requests."""

    name = "httpx2"
    targets = ["httpx2.HTTPTransport", "httpx2.AsyncHTTPTransport"]  # noqa: RUF012
    target_methods = ["handle_request", "handle_async_request"]  # noqa: RUF012

    @classmethod
    def to_httpx_request(cls, **kwargs: Any) -> httpx.Request:
        request: httpx2.Request = kwargs["request"]
        return httpx.Request(request.method, str(request.url), headers=request.headers.raw, content=request.content)

    @classmethod
    def from_sync_httpx_response(cls, httpx_response: httpx.Response, target: Any, **kwargs: Any) -> httpx2.Response:
        return httpx2.Response(
            httpx_response.status_code, headers=httpx_response.headers.raw, content=httpx_response.read()
        )

    @classmethod
    async def from_async_httpx_response(
        cls, httpx_response: httpx.Response, target: Any, **kwargs: Any
    ) -> httpx2.Response:
        content = await httpx_response.aread()
        return httpx2.Response(httpx_response.status_code, headers=httpx_response.headers.raw, content=content)
