"""OAuth logins to MCP servers kept in the store: tokens, client registrations, and logins waiting for a code.

One row per server and identity holds the tokens and the client registration, so every
process that talks to the server uses the same login and refreshes it once (a refresh is
claimed with a lease, like a tool call). A login a person has yet to finish is a row keyed
by its OAuth ``state``, holding the PKCE verifier; the redirect endpoint records the code on
it exactly once. Rows hold secrets: nothing here logs a token, code, verifier or state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from sqlalchemy import Connection, delete, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite

from tarry.clock import utcnow
from tarry.errors import QuestionExpiredError
from tarry.principals import Channel
from tarry.store.engine import Database
from tarry.store.moment import NOW, UNTIL, lease_values
from tarry.store.tables import mcp_credentials, mcp_logins, questions

logger = logging.getLogger("tarry.store")
LOGIN_KEY = "oauth-login:"
"""The key of a login's URL question is this prefix and the login's ``state``."""
LoginOutcome = Literal["done", "refused", "expired", "used", "unknown"]


@dataclass(frozen=True)
class Credentials:
    """What the store holds for one server and identity (JSON as the OAuth SDK dumps it)."""

    tokens: dict[str, Any] | None
    tokens_expire_at: datetime | None
    client_info: dict[str, Any] | None
    version: int
    """Bumped by every write of the tokens, so a process can tell another refreshed them."""


@dataclass(frozen=True)
class ReceivedCode:
    """An authorization code the redirect brought, with the PKCE verifier of its login."""

    code: str
    code_verifier: str
    issuer: str | None
    refused: str | None = None
    """Why the redirect was refused (then no code was kept): the authorization server's words, or the wrong issuer."""


class RecordsHolder(Protocol):
    """What the OAuth rows use of the [`Store`][tarry.store.Store] that holds them."""

    @property
    def db(self) -> Database:
        """The database the rows are in."""
        ...

    @property
    def owner(self) -> str:
        """Who the store claims work as (a token refresh is claimed like a call)."""
        ...

    async def answer(self, question_id: str, /, *, channel: Channel = "code") -> bool:
        """Answer a login's URL question once its redirect arrived."""
        ...


class OAuthRecords:
    """The store's OAuth rows (``store.oauth``); [`tarry.mcp.oauth.OAuthLogin`][tarry.mcp.OAuthLogin] uses them."""

    def __init__(self, store: RecordsHolder) -> None:
        self.store = store

    async def credentials(self, server: str, identity: str = "") -> Credentials:
        """The tokens and client registration kept for ``server`` and ``identity`` (empty when none)."""
        query = select(mcp_credentials).where(
            mcp_credentials.c.server == server, mcp_credentials.c.identity == identity
        )
        row = await self.store.db.run_read(lambda connection: connection.execute(query).mappings().one_or_none())
        if row is None:
            return Credentials(None, None, None, 0)
        return Credentials(row["tokens"], row["tokens_expire_at"], row["client_info"], row["version"])

    async def save_tokens(
        self, server: str, identity: str, tokens: dict[str, Any], expires_at: datetime | None
    ) -> None:
        """Keep new tokens (one transaction), ending any claim on refreshing them."""
        values = {"tokens": tokens, "tokens_expire_at": expires_at, "refreshing_by": None, "refreshing_until": None}
        await self._write(server, identity, values, bump=True)

    async def save_client_info(self, server: str, identity: str, client_info: dict[str, Any]) -> None:
        """Keep the client registration (one transaction)."""
        await self._write(server, identity, {"client_info": client_info}, bump=False)

    async def _write(self, server: str, identity: str, values: dict[str, Any], *, bump: bool) -> None:
        def write(connection: Connection) -> None:
            _ensure_row(connection, server, identity)
            changes = {**values, "updated_at": utcnow()}
            if bump:
                changes["version"] = mcp_credentials.c.version + 1
            connection.execute(
                update(mcp_credentials)
                .where(mcp_credentials.c.server == server, mcp_credentials.c.identity == identity)
                .values(**changes)
            )

        await self.store.db.run_write(write)

    async def claim_refresh(self, server: str, identity: str, *, seconds: float) -> bool:
        """Claim refreshing the tokens for ``seconds``; ``False`` while another process holds the claim.

        The claim is a lease, written and judged by the lease clock (``tarry.store.moment``).
        """
        owner = self.store.owner

        def write(connection: Connection) -> bool:
            _ensure_row(connection, server, identity)
            free = (mcp_credentials.c.refreshing_until.is_(None)) | (mcp_credentials.c.refreshing_until <= NOW)
            result = connection.execute(
                update(mcp_credentials)
                .where(mcp_credentials.c.server == server, mcp_credentials.c.identity == identity, free)
                .values(refreshing_by=owner, refreshing_until=UNTIL),
                lease_values(timedelta(seconds=seconds)),
            )
            return result.rowcount == 1

        return await self.store.db.run_write(write)

    async def release_refresh(self, server: str, identity: str) -> None:
        """End this store's claim on refreshing the tokens (its refresh failed): another process may try."""
        mine = update(mcp_credentials).where(
            mcp_credentials.c.server == server,
            mcp_credentials.c.identity == identity,
            mcp_credentials.c.refreshing_by == self.store.owner,
        )
        await self.store.db.run_write(
            lambda connection: connection.execute(mine.values(refreshing_by=None, refreshing_until=None))
        )

    async def forget(self, server: str, identity: str = "") -> None:
        """Drop the tokens, registration and unfinished logins of ``server`` and ``identity`` (a log-out)."""

        def write(connection: Connection) -> None:
            for table in (mcp_credentials, mcp_logins):
                connection.execute(delete(table).where(table.c.server == server, table.c.identity == identity))

        await self.store.db.run_write(write)

    async def begin_login(
        self,
        server: str,
        identity: str,
        *,
        state: str,
        code_verifier: str,
        ttl: float,
        issuer: str | None = None,
        issuer_required: bool = False,
    ) -> None:
        """Record a login a person is about to make: its ``state`` and PKCE verifier, for ``ttl`` seconds.

        ``issuer`` is the issuer of the authorization server the login is sent to: a redirect whose
        ``iss`` (RFC 9207) names another is refused, as is one without ``iss`` when ``issuer_required``
        (the server advertised that it sends it).
        """
        now = utcnow()
        row = {
            "state": state, "server": server, "identity": identity, "code_verifier": code_verifier,
            "created_at": now, "expires_at": now + timedelta(seconds=ttl), "expected_issuer": issuer,
            "issuer_required": issuer_required,
        }  # fmt: skip
        await self.store.db.run_write(lambda connection: connection.execute(mcp_logins.insert().values(**row)))

    async def receive_code(
        self, state: str, code: str, issuer: str | None = None, *, channel: Channel = "web"
    ) -> LoginOutcome:
        """Record the code the redirect brought for the login ``state``, exactly once.

        ``"done"`` when this call recorded it (and answered the URL questions of every login to
        the same server and identity still waiting, since they share the tokens, so the waiting
        calls and chats carry on); ``"refused"`` when ``issuer`` is not the one the login was sent
        to (the code is dropped, ``refusal`` says why, and the questions are answered all the
        same, so the next attempt reports it); ``"used"`` when a redirect came before,
        ``"expired"`` when the login's time ran out, ``"unknown"`` when no login has this state.
        The trail records the answers as made by nobody known (the redirect names no one) through
        ``channel``. Raises ``ValueError`` for a state, code or issuer holding a NUL character.
        """
        _check_text(state=state, code=code, issuer=issuer)
        if not state or not code:
            return "unknown"

        def received(row: Any) -> dict[str, Any]:
            problem = _issuer_problem(issuer, row["expected_issuer"], row["issuer_required"])
            return {"code": code, "issuer": issuer} if problem is None else {"refused": problem}

        return await self._receive(state, received, channel)

    async def refuse(self, state: str, reason: str, *, channel: Channel = "web") -> LoginOutcome:
        """Record that the authorization server refused the login ``state``, saying ``reason``.

        ``"refused"`` when recorded (the URL questions are answered, so the next attempt reports
        ``reason``); else, as ``receive_code``, ``"used"``, ``"expired"`` or ``"unknown"``:
        then nothing is recorded and ``reason`` cannot be trusted to come from a login tarry began.
        """
        _check_text(state=state, reason=reason)
        if not state:
            return "unknown"
        return await self._receive(state, lambda row: {"refused": reason}, channel)

    async def refusal(self, state: str) -> str | None:
        """Why the redirect of the login ``state`` was refused, or ``None``."""
        _check_text(state=state)
        query = select(mcp_logins.c.refused).where(mcp_logins.c.state == state)
        found: str | None = await self.store.db.run_read(lambda connection: connection.scalar(query))
        return found

    async def _receive(self, state: str, received: Callable[[Any], dict[str, Any]], channel: Channel) -> LoginOutcome:
        """Record what a redirect brought (``received(row)``: the code, or why it was refused) on a waiting login."""

        def write(connection: Connection) -> tuple[LoginOutcome, tuple[str, str]]:
            now = utcnow()
            query = select(
                mcp_logins.c.code, mcp_logins.c.refused, mcp_logins.c.expires_at, mcp_logins.c.server,
                mcp_logins.c.identity, mcp_logins.c.expected_issuer, mcp_logins.c.issuer_required,
            ).where(mcp_logins.c.state == state)  # fmt: skip
            row = connection.execute(query.with_for_update()).mappings().one_or_none()
            if row is None:
                return "unknown", ("", "")
            login = (row["server"], row["identity"])
            if row["code"] is not None or row["refused"] is not None:
                return "used", login
            if row["expires_at"] <= now:
                return "expired", login
            values = received(row)
            connection.execute(
                update(mcp_logins)
                .where(mcp_logins.c.state == state, mcp_logins.c.code.is_(None), mcp_logins.c.refused.is_(None))
                .values(**values, received_at=now)
            )
            return ("refused" if "refused" in values else "done"), login

        outcome, (server, identity) = await self.store.db.run_write(write)
        if outcome not in ("done", "refused"):
            logger.info("A login redirect was refused: %s", outcome)
            return outcome
        logger.info("A login's redirect arrived (%s)", "a code" if outcome == "done" else "refused")
        logins = select(literal(LOGIN_KEY) + mcp_logins.c.state).where(
            mcp_logins.c.server == server, mcp_logins.c.identity == identity
        )
        waiting = select(questions.c.id).where(
            questions.c.key.in_(logins), questions.c.kind == "url", questions.c.decision.is_(None)
        )
        ids = await self.store.db.run_read(lambda connection: list(connection.scalars(waiting)))
        for question_id in ids:
            with contextlib.suppress(QuestionExpiredError):  # the call closes as lapsed; the code stays for later
                await self.store.answer(question_id, channel=channel)
        return outcome

    async def take_code(self, server: str, identity: str) -> ReceivedCode | None:
        """The newest redirect received for ``server`` and ``identity`` and not used yet, marked used (once).

        Its ``code``, or, when the redirect was refused, ``refused`` saying why (and an empty code).
        """

        def write(connection: Connection) -> ReceivedCode | None:
            now = utcnow()
            query = (
                select(
                    mcp_logins.c.state, mcp_logins.c.code, mcp_logins.c.code_verifier, mcp_logins.c.issuer,
                    mcp_logins.c.refused,
                )
                .where(
                    mcp_logins.c.server == server,
                    mcp_logins.c.identity == identity,
                    mcp_logins.c.received_at.is_not(None),
                    mcp_logins.c.used_at.is_(None),
                    mcp_logins.c.expires_at > now,
                )
                .order_by(mcp_logins.c.received_at.desc())
                .limit(1)
                .with_for_update()
            )  # fmt: skip
            row = connection.execute(query).mappings().one_or_none()
            if row is None:
                return None
            taken = connection.execute(
                update(mcp_logins)
                .where(mcp_logins.c.state == row["state"], mcp_logins.c.used_at.is_(None))
                .values(used_at=now)
            )
            if taken.rowcount != 1:
                return None
            return ReceivedCode(row["code"] or "", row["code_verifier"], row["issuer"], row["refused"])

        return await self.store.db.run_write(write)


def _check_text(**values: str | None) -> None:
    """Raise ``ValueError`` naming the first value that holds a NUL (PostgreSQL refuses it in a query)."""
    for name, value in values.items():
        if value is not None and "\x00" in value:
            raise ValueError(f"A login's {name} cannot hold a NUL character")


def _issuer_problem(given: str | None, expected: str | None, required: bool) -> str | None:
    """Why a redirect's ``iss`` refuses it (RFC 9207 §2.4: compared as strings), or ``None`` when it may be taken.

    A login with no issuer on record (begun before tarry recorded one) is not judged here; the SDK
    still checks the issuer when it exchanges the code.
    """
    if given is not None and expected is not None and given != expected:
        return (
            f"the answer came from the issuer {given!r}, not from {expected!r}, "
            "the authorization server the login was sent to"
        )
    if given is None and required:
        return f"the answer did not say which issuer sent it, and {expected!r} says it always does"
    return None


def _ensure_row(connection: Connection, server: str, identity: str) -> None:
    """Insert the credentials row unless it exists (no error when another process inserts it first)."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    values = {"server": server, "identity": identity, "version": 0, "updated_at": utcnow()}
    connection.execute(dialect.insert(mcp_credentials).values(**values).on_conflict_do_nothing())
