"""A client for the official MCP conformance suite, written on tarry's public API only.

``conformance client --command "python conformance_client.py" --scenario NAME`` runs it with
the scenario server's URL as its last argument, the scenario's name in
``MCP_CONFORMANCE_SCENARIO`` and, for some scenarios, the calls to make (and OAuth client
credentials) in ``MCP_CONFORMANCE_CONTEXT``.

What it does is what an application does: a :class:`~tarry.testing.ScriptedModel` calls the
tools the scenario expects (the context's ``toolCalls``, else every tool the server lists,
with arguments made from its schema), and every question that comes up (a server's form
or URL question, an OAuth login) is answered through ``pending_questions()``/``answer()``
until no call waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tarry import Chat, Field, Question
from tarry.mcp import DPoP, JWTBearerLogin, LoginRequired, MCPServer, McpTool, OAuthLogin
from tarry.mcp.jwt_bearer import id_jag_exchange
from tarry.store import Store
from tarry.testing import ScriptedModel

ROUNDS = 20
REDIRECT = "http://localhost:3030/callback"
CIMD = "https://conformance-test.local/client-metadata.json"
STORE: Store | None = None
"""With ``TARRY_CONFORMANCE_LOGIN=stored``: the store that keeps the login (tarry's ``OAuthLogin``)."""


def sample(schema: Mapping[str, Any]) -> Any:
    """A value that fits a JSON schema property (its default, first choice, or a plain value of its type)."""
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return arguments_for(schema)
    return "tarry"


def arguments_for(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool's ``inputSchema``: a value for every required property."""
    properties = schema.get("properties") or {}
    return {name: sample(properties.get(name) or {}) for name in schema.get("required") or []}


def value_for(field: Field) -> Any:
    """What the person types into a field: its default, else its first choice, else a value of its type."""
    if field.default is not None:
        return field.default
    if field.choices:
        first = next(iter(field.choices))
        return [first] if field.type == "array" else first
    return {"integer": 1, "number": 1.5, "boolean": True, "array": []}.get(field.type, "tarry")


def calls_for(scenario: str, tools: list[McpTool]) -> list[dict[str, Any]]:
    """The tool calls the scenario expects: each listed tool once, or what the scenario's text asks."""
    if scenario == "json-schema-2020-12-preservation":
        # Echo the focal tool's inputSchema exactly as tarry shows it to the model.
        focal = next(tool for tool in tools if tool.name != "json_schema_echo")
        return [{"name": "json_schema_echo", "arguments": {"schema": focal.parameters}}]
    return [{"name": tool.name, "arguments": arguments_for(tool.parameters)} for tool in tools]


async def answer(chat: Chat, question: Question) -> None:
    """Accept the question: approve it, open its URL (consent, or a login), or fill in its form."""
    if STORE is not None and question.key is not None and question.key.startswith("oauth-login:"):
        assert question.url is not None
        await log_in(STORE, question.url)  # the redirect answers the question
    elif question.kind == "form":
        values = {field.name: value_for(field) for field in question.fields if field.name and field.default is None}
        await chat.answer(question, **values)
    else:
        await chat.answer(question)


async def carry_on(chat: Chat) -> None:
    """Carry the chat on until no call waits, honouring the tasks' poll intervals."""
    for _ in range(ROUNDS):
        if not chat.waiting:
            return
        tasks = await chat.pending_tasks()
        if tasks:
            await asyncio.sleep(min(task.poll_interval or 0.2 for task in tasks))
        await chat.complete()
        if chat.waiting and not tasks:
            await asyncio.sleep(0.05)  # the questions are being answered meanwhile
    raise SystemExit(f"calls still wait after {ROUNDS} rounds")


async def answer_questions(chat: Chat) -> None:
    """Answer every question as it comes up, also while a call waits inside the server for it."""
    answered: set[str] = set()
    while True:
        for question in await chat.pending_questions():
            if question.id not in answered:
                answered.add(question.id)
                await answer(chat, question)
        await asyncio.sleep(0.05)


class MemoryTokens:
    """The SDK's ``TokenStorage`` in memory, optionally holding a pre-registered client."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Stands in for the person's browser: opens the authorization URL and reads the code off the redirect."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient() as client:
            response = await client.get(url)
        location = response.headers.get("location")
        if location is None:
            raise RuntimeError(f"the authorization server did not redirect ({response.status_code})")
        query = parse_qs(urlsplit(location).query)
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None, "the authorization URL was not opened"
        return self.result


async def enterprise(url: str, context: Mapping[str, Any]) -> IdentityAssertionOAuthProvider:
    """SEP-990: the person's ID token traded for an ID-JAG at the identity provider, then for an MCP token.

    The authorization server is configuration in SEP-990; a deployment knows it, and this
    client reads it once from the MCP server's protected resource metadata to stand in for that.
    """
    async with httpx2.AsyncClient() as client:
        parts = urlsplit(url)
        found = await client.get(f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}")
    issuer = found.json()["authorization_servers"][0]
    exchange = id_jag_exchange(context["idp_token_endpoint"], context["idp_id_token"], context["idp_client_id"])
    return IdentityAssertionOAuthProvider(
        url, MemoryTokens(), context["client_id"], context["client_secret"], issuer, exchange,
        token_endpoint_auth_method="client_secret_basic",
    )  # fmt: skip


def oauth(url: str, scenario: str, context: Mapping[str, Any]) -> OAuthClientProvider | None:
    """The SDK's OAuth provider the scenario needs, or ``None`` for the scenarios without auth."""
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-jwt":  # private_key_jwt: the SDK signs with the scenario's key
        client_id = context["client_id"]
        signer = SignedJWTParameters(
            issuer=client_id, subject=client_id, signing_key=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
        )  # fmt: skip
        return PrivateKeyJWTOAuthProvider(url, MemoryTokens(), client_id, signer.create_assertion_provider())
    if scenario == "auth/wif-jwt-bearer":  # the workload's JWT for a token (RFC 7523), as a public client
        jwt = context["valid_jwt"]

        async def workload_jwt(audience: str) -> str:
            return str(jwt)

        return JWTBearerLogin(url, MemoryTokens(), context["client_id"], workload_jwt)
    if scenario.startswith("auth/client-credentials"):
        return ClientCredentialsOAuthProvider(
            url, MemoryTokens(), context["client_id"], context["client_secret"], issuer=context.get("issuer")
        )
    registered = None
    if "client_id" in context:
        registered = OAuthClientInformationFull(
            client_id=context["client_id"], client_secret=context.get("client_secret"), redirect_uris=[REDIRECT],
            token_endpoint_auth_method="client_secret_basic",
        )  # fmt: skip
    metadata = OAuthClientMetadata(
        client_name="tarry conformance client", redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
    )  # fmt: skip
    browser = Browser()
    return OAuthClientProvider(
        url, metadata, MemoryTokens(registered), redirect_handler=browser.open, callback_handler=browser.callback,
        client_metadata_url=CIMD,
    )  # fmt: skip


async def log_in(store: Store, url: str) -> None:
    """The person's browser and tarry's redirect endpoint: open the authorization URL, record the code it sends."""
    async with httpx2.AsyncClient() as client:
        response = await client.get(url)
    location = response.headers.get("location")
    if location is None:
        raise RuntimeError(f"the authorization server did not redirect ({response.status_code})")
    query = parse_qs(urlsplit(location).query)
    state, code, iss = (query.get(name, [""])[0] for name in ("state", "code", "iss"))
    outcome = await store.oauth.receive_code(state, code, iss or None)
    if outcome != "done":
        raise RuntimeError(f"the login's redirect was refused: {outcome}")


def stored_login(store: Store, url: str, context: Mapping[str, Any]) -> OAuthLogin:
    """tarry's ``OAuthLogin`` for the authorization-code scenarios, the login kept in ``store``."""
    return OAuthLogin(
        store, url, redirect_uri=REDIRECT, client_name="tarry conformance client", client_id=context.get("client_id"),
        client_secret=context.get("client_secret"), client_metadata_url=CIMD,
    )  # fmt: skip


async def run(url: str, scenario: str, context: Mapping[str, Any], auth: Any, store: Store | None) -> None:
    if scenario.startswith("auth/dpop"):  # DPoP-bound tokens (RFC 9449): the same login, its tokens bound to a key
        auth = DPoP(auth)
    async with MCPServer(url=url, name="conformance", auth=auth) as server:
        calls = context.get("toolCalls")
        if calls is None:
            calls = calls_for(scenario, await server.list_tools())
        model = ScriptedModel([calls, "done"] if calls else ["done"])
        chat = Chat(model=model, tools=[server]) if store is None else await store.create_chat(model, [server])
        answering = asyncio.create_task(answer_questions(chat))
        try:
            await chat.ask("Run the scenario.")
            await carry_on(chat)
        finally:
            answering.cancel()
        for message in chat.messages:
            if message.role == "tool":
                print(message.content, file=sys.stderr)


async def main(url: str) -> None:
    global STORE
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    stored = os.environ.get("TARRY_CONFORMANCE_LOGIN") == "stored" and scenario.startswith("auth/")
    if scenario == "auth/enterprise-managed-authorization":
        await run(url, scenario, context, await enterprise(url, context), None)
        return
    if not stored or scenario.startswith("auth/client-credentials") or scenario == "auth/wif-jwt-bearer":
        await run(url, scenario, context, oauth(url, scenario, context), None)
        return
    with tempfile.TemporaryDirectory() as folder:
        async with Store(f"sqlite:///{folder}/tarry.db") as store:
            STORE = store
            await store.setup()
            for _ in range(ROUNDS):
                try:
                    await run(url, scenario, context, stored_login(store, url, context), store)
                    return
                except LoginRequired as login:  # the first login: the tools cannot be listed without it
                    await log_in(store, login.url)
            raise SystemExit(f"still no login after {ROUNDS} tries")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))
