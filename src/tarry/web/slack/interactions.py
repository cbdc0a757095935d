"""``create_slack_app``: the endpoint Slack sends button clicks and modal submissions to (its Interactivity URL).

Each request is checked against Slack's signature before anything is read; the Slack user becomes a tarry
principal through the application's ``principal_for``, and the decision goes the inbox's way
([`Decider`][tarry.web.decisions.Decider] → [`Store.decide`][tarry.store.Store.decide]) through the channel
``slack``, so the rules and the approval policy apply as to any decider.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tarry.errors import UnknownQuestionError
from tarry.notices import NoticeEvent
from tarry.principals import Principal, principal_of
from tarry.questions import Question
from tarry.store import Store
from tarry.web.access import Access, Shown
from tarry.web.decisions import Action, Decider, OnAnswer, Result
from tarry.web.slack.blocks import ANSWER, APPROVE, DECLINE, NOTE_BLOCK, answer_modal, decline_modal, submitted_values
from tarry.web.slack.sender import SlackSender
from tarry.web.slack.why import refusal, why_not_open

logger = logging.getLogger("tarry.web.slack")
PrincipalFor = Callable[[str, str | None], Principal | Awaitable[Principal | None] | None]
"""The application's mapping of a Slack user (their user id and workspace's team id) to a tarry principal;
``None`` refuses them."""
SLACK_PRINCIPAL = "tarry.slack.principal"
"""Where a request's scope keeps the principal ``principal_for`` named."""
PATH = "/interactions"
"""The endpoint's path within the app: the Interactivity Request URL ends with it."""


@dataclass(frozen=True)
class Clicked:
    """Who did what in Slack, and where: the parts of an interaction payload tarry reads."""

    user: str
    team: str | None
    channel: str | None
    ts: str | None


def create_slack_app(
    store: Store,
    sender: SlackSender,
    *,
    signing_secret: str,
    principal_for: PrincipalFor,
    on_answer: OnAnswer | None = None,
) -> Starlette:
    """The Slack interactions endpoint, ``POST /interactions``, as an ASGI app to mount into yours.

    ``app.mount("/slack", create_slack_app(...))`` makes ``https://your.host/slack/interactions`` the
    Request URL to give in the Slack app's *Interactivity & Shortcuts* settings. A request whose
    ``X-Slack-Signature`` does not match ``signing_secret`` (the Slack app's *Signing Secret*), or whose
    ``X-Slack-Request-Timestamp`` is more than 5 minutes away, is refused with 401 before its body is read.

    ``principal_for(slack_user_id, team_id)`` (sync or async) says who a Slack user is in your
    application, as a [`Principal`][tarry.principals.Principal], or ``None`` to refuse them (they are
    told so in an ephemeral message). Approve decides at once; Decline and Answer open a modal
    (``views.open``) whose submission decides. Every decision is recorded through the channel ``slack``
    by the rules of any other (a two-person policy counts a Slack approval as one); one that is refused
    (another person decided first, the question expired, the policy refused) is explained in an
    ephemeral message, and an answer that does not fit the form is shown on the modal's fields.
    After each decision ``sender`` updates every Slack message of the question; ``on_answer``
    runs as with [`create_app`][tarry.web.create_app].
    """
    verifier = SignatureVerifier(signing_secret)
    access = Access(_anyone, None, _slack_principal)
    interactions = Interactions(store, sender, Decider(store, access, on_answer), principal_for)

    async def endpoint(request: Request) -> Response:
        body = await request.body()
        if not _signed(verifier, body, request):
            return JSONResponse({"error": "The request does not carry a valid, recent Slack signature."}, 401)
        payload = _payload(body)
        if payload is None:
            return JSONResponse({"error": "The body must be form-encoded payload=<JSON object>."}, 400)
        return await interactions.handle(request, payload)

    return Starlette(routes=[Route(PATH, endpoint, methods=["POST"])])


def _anyone(connection: HTTPConnection, item: Shown | None) -> bool:
    """Slack requests reach the decider only signed, and from a person ``principal_for`` named."""
    return True


def _slack_principal(connection: HTTPConnection) -> Principal | None:
    found: Principal | None = connection.scope.get(SLACK_PRINCIPAL)
    return found


def _signed(verifier: SignatureVerifier, body: bytes, request: Request) -> bool:
    try:
        return verifier.is_valid_request(body, dict(request.headers))
    except ValueError:  # a timestamp that is not a number
        return False


def _payload(body: bytes) -> dict[str, Any] | None:
    """The JSON object of a form-encoded ``payload=`` body, or ``None`` when the body is not one."""
    try:
        form = parse_qs(body.decode(), strict_parsing=True)
        parsed = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError):
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("user"), dict):
        return None
    return parsed


class Interactions:
    """Turns Slack's interaction payloads into decisions, modals and ephemeral answers."""

    def __init__(self, store: Store, sender: SlackSender, decider: Decider, principal_for: PrincipalFor) -> None:
        self.store = store
        self.sender = sender
        self.decider = decider
        self.principal_for = principal_for

    async def handle(self, request: Request, payload: dict[str, Any]) -> Response:
        """Answer one interaction payload (``block_actions`` or ``view_submission``); others are acknowledged."""
        kind = payload.get("type")
        if kind not in ("block_actions", "view_submission"):
            return Response(status_code=200)
        clicked = _clicked(payload)
        principal = await self._principal(clicked)
        if principal is None:
            text = "You cannot decide tarry's questions from this Slack account: the app does not know who you are."
            return _acknowledged(self._tell(clicked, text))
        request.scope[SLACK_PRINCIPAL] = principal
        if kind == "block_actions":
            return await self._clicked(request, payload, clicked)
        return await self._submitted(request, payload, clicked)

    async def _principal(self, clicked: Clicked) -> Principal | None:
        found = self.principal_for(clicked.user, clicked.team)
        if inspect.isawaitable(found):
            found = await found
        try:
            return principal_of(found)
        except ValueError:
            logger.exception("principal_for named a principal the store cannot record, for Slack user %s", clicked.user)
            return None

    async def _clicked(self, request: Request, payload: dict[str, Any], clicked: Clicked) -> Response:
        actions = payload.get("actions") or [{}]
        action_id, question_id = actions[0].get("action_id"), str(actions[0].get("value") or "")
        if action_id == APPROVE:
            return await self._decide(request, clicked, question_id, "approve")
        if action_id not in (DECLINE, ANSWER):
            return Response(status_code=200)
        try:
            question = await self.store.question(question_id)
        except UnknownQuestionError:
            return _acknowledged(self._tell(clicked, "This question no longer exists."))
        closed = why_not_open(question)
        if closed is not None:
            return _acknowledged(self._tell(clicked, closed), self._show(question))
        metadata = json.dumps({"question": question.id, "channel": clicked.channel, "ts": clicked.ts})
        modal = decline_modal(question, metadata) if action_id == DECLINE else answer_modal(question, metadata)
        try:
            await self.sender.client.views_open(trigger_id=str(payload.get("trigger_id")), view=modal)
        except SlackApiError as error:  # the trigger lapsed (3 s), say: the click can be tried again
            text = f"Slack would not open the form ({error.response.get('error')}); please try again."
            return _acknowledged(self._tell(clicked, text))
        return Response(status_code=200)

    async def _submitted(self, request: Request, payload: dict[str, Any], clicked: Clicked) -> Response:
        view = payload.get("view") or {}
        state = (view.get("state") or {}).get("values") or {}
        try:
            metadata = json.loads(view.get("private_metadata") or "{}")
            question_id = str(metadata["question"])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "The modal does not name a question."}, 400)
        clicked = Clicked(clicked.user, clicked.team, metadata.get("channel"), metadata.get("ts"))
        if view.get("callback_id") == DECLINE:
            note = ((state.get(NOTE_BLOCK) or {}).get(NOTE_BLOCK) or {}).get("value") or None
            return await self._decide(request, clicked, question_id, "decline", note=note)
        try:
            question = await self.store.question(question_id)
        except UnknownQuestionError:
            return _acknowledged(self._tell(clicked, "This question no longer exists."))
        values = submitted_values(question, state)
        return await self._decide(request, clicked, question_id, "answer", values=values, fields=question)

    async def _decide(
        self,
        request: Request,
        clicked: Clicked,
        question_id: str,
        action: Action,
        *,
        note: str | None = None,
        values: dict[str, Any] | None = None,
        fields: Question | None = None,
    ) -> Response:
        result = await self.decider.decide(request, question_id, action, values, note, channel="slack")
        if result.outcome == "invalid" and fields is not None:
            names = {field.name for field in fields.fields}
            shown = {name: problem for name, problem in result.errors.items() if name in names}
            if shown:  # the modal stays open, each problem under its field
                return JSONResponse({"response_action": "errors", "errors": shown})
        return _acknowledged(*self._follow_up(clicked, result))

    def _follow_up(self, clicked: Clicked, result: Result) -> list[Callable[[], Awaitable[None]]]:
        """What to do once Slack has its answer: update the question's messages, and say why when refused."""
        work: list[Callable[[], Awaitable[None]]] = []
        if result.question is not None and result.outcome != "invalid":
            work.append(self._show(result.question))
        text = refusal(result)
        if text is not None:
            work.append(self._tell(clicked, text))
        return work

    def _show(self, question: Question) -> Callable[[], Awaitable[None]]:
        async def show() -> None:
            event: NoticeEvent = "expired" if why_not_open(question) and question.verdict is None else "decided"
            await self.sender.update(question, event)

        return show

    def _tell(self, clicked: Clicked, text: str) -> Callable[[], Awaitable[None]]:
        async def tell() -> None:
            if clicked.channel is None:
                logger.warning("Could not tell Slack user %s (no channel): %s", clicked.user, text)
                return
            await self.sender.client.chat_postEphemeral(channel=clicked.channel, user=clicked.user, text=text)

        return tell


def _clicked(payload: dict[str, Any]) -> Clicked:
    user = payload["user"]
    team = (payload.get("team") or {}).get("id") or user.get("team_id")
    container = payload.get("container") or {}
    channel = container.get("channel_id") or (payload.get("channel") or {}).get("id")
    return Clicked(str(user.get("id")), team, channel, container.get("message_ts"))


def _acknowledged(*work: Callable[[], Awaitable[None]]) -> Response:
    """An empty 200 (Slack's acknowledgement; for a modal, it closes), then ``work`` in order, each logged if it
    fails."""

    async def run() -> None:
        for step in work:
            try:
                await step()
            except Exception:
                logger.exception("A Slack follow-up failed")

    return Response(status_code=200, background=BackgroundTask(run))
