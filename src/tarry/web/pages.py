"""The inbox page: what waits, rendered as cards with forms; the forms post back here."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, Depends, Request
from markupsafe import Markup, escape
from starlette.datastructures import FormData
from starlette.requests import HTTPConnection
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.templating import Jinja2Templates

from tarry.approvals import refusals
from tarry.clock import utcnow
from tarry.errors import (
    ChatNotFoundError,
    NotAllowedError,
    NotDecidableError,
    ProposalChangedError,
    QuestionExpiredError,
)
from tarry.grants import Allow
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store.outbox import DeliveryRecord
from tarry.store.paging import QuestionPage
from tarry.web import views
from tarry.web.access import CSRF_FIELD, Access, ChatRef, Forbidden, NotLoggedIn
from tarry.web.conversation import turns
from tarry.web.decisions import Action, Decider
from tarry.web.edit_form import changes_of, typed_arguments
from tarry.web.events import LiveSignal, changes
from tarry.web.views import FIELD_PREFIX, SHOWN_PREFIX

TEMPLATES = Path(__file__).parent / "templates"
NOTE_LIMIT = 10_000
DELIVERIES_SHOWN = 20
"""Deliveries of notices a question's card lists at most (the latest)."""
NOTICES = {
    "answered": ("ok", "Your answer was recorded. The chat carries on when a process runs it (a worker, or the app)."),
    "approved": ("ok", "Approved. The call runs when a process carries the chat on (a worker, or the app)."),
    "allowed": (
        "ok",
        "Approved, and allowed in this conversation for an hour: its next calls of this tool are approved at once, "
        "as you. The call runs when a process carries the chat on (a worker, or the app).",
    ),
    "counted": ("ok", "Your approval was counted. The call needs more people's approval before it runs."),
    "declined": ("ok", "Declined. Your note goes to the model."),
    "responded": ("ok", "Your result was recorded in the tool's place. The tool will not run; the model reads it."),
    "refused": ("warn", "You may not decide this call, or you already approved it. Nothing was changed."),
    "taken": ("warn", "Someone else already answered this question. Your answer was not recorded."),
    "yours": ("warn", "You already decided this question. Nothing was changed."),
    "expired": ("warn", "This question expired before your answer arrived. Nothing was recorded."),
    "running": ("warn", "The call is running right now; it can no longer be declined."),
    "unknown": ("warn", "There is no such question."),
    "all-approved": (
        "ok",
        "Approved every call this conversation waited on, all at once. The chat carries on when a "
        "process runs it (a worker, or the app).",
    ),
    "all-nothing": ("warn", "Nothing in this conversation waits for approval any more. Nothing was changed."),
    "all-expired": ("warn", "Nothing was approved: this question expired, so none of the conversation's calls was."),
    "all-refused": (
        "warn",
        "Nothing was approved: you may not approve this question, so none of the conversation's calls was.",
    ),
    "all-stopped": (
        "warn",
        "Nothing was approved: this question needs a decision of its own (an answer, a link, or "
        "more people's approval), so none of the conversation's calls was approved.",
    ),
    "all-changed": (
        "error",
        "Nothing was approved: this call's arguments changed since you saw them, so none of the conversation's "
        "calls was. Look at them again below.",
    ),
    "all-unseen": (
        "error",
        "Nothing was approved: this call was asked after the page showed the conversation, so none of its calls "
        "was. Look at them again below.",
    ),
    "all-unknown": ("warn", "There is no such conversation."),
    "all-invalid": (
        "warn",
        "Nothing was approved: your identity cannot be recorded, or the form did not say which calls you saw.",
    ),
}
"""What the page says after a decision, by outcome: a tone and a sentence."""
GRANT_NOTICES = {
    "revoked": ("ok", "Revoked. The grant approves nothing from now on: its tool's calls wait for a person again."),
    "unknown": ("warn", "There is no such grant. Nothing was changed."),
    "invalid": ("warn", "Your identity cannot be recorded, so the grant was not revoked."),
    "nobody": (
        "warn",
        "The grant was not revoked: this inbox does not say who you are, and a revocation records who made it.",
    ),
}
"""What the grants page says after a revocation, by outcome: a tone and a sentence."""
ALLOW_FOR_AN_HOUR = Allow("chat", ttl=3600)
"""The standing grant the approval form's second button makes: this tool, in this conversation, for an hour."""


def templates() -> Jinja2Templates:
    """The page templates, with autoescaping on for every one of them."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.globals.update(ago=views.ago, until=views.until, clock=views.clock, iso=views.iso, span=views.span)
    environment.filters["sent"] = sent
    environment.finalize = shown
    return Jinja2Templates(env=environment)


def shown(value: Any) -> Any:
    """What a template prints of ``value``: text with its hidden characters made visible (``\\uXXXX``).

    Applied to every ``{{ … }}``, so no text from a model, a tool or a person can reach a page raw;
    what the ``sent`` filter marks (a form's values, which go back as they came) is left alone.
    """
    return views.visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def sent(value: Any) -> Markup:
    """``value`` escaped for HTML but otherwise as it is: a form's value or input name, which must go back unchanged."""
    return escape(value)


def root_of(connection: HTTPConnection) -> str:
    """The path the app is mounted at (empty at the root)."""
    return str(connection.scope.get("root_path", "")).rstrip("/")


class Refused(Exception):
    """A page request that is refused: the status and the reason the refusal page explains."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Pages:
    """Renders the page templates, giving every browser its CSRF cookie and forms their token."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self.templates = templates()

    def render(self, connection: HTTPConnection, name: str, context: dict[str, Any], status: int = 200) -> Response:
        """The template ``name`` with ``context``, the root path, the CSRF token and the time."""
        request = connection if isinstance(connection, Request) else Request(connection.scope)
        cookie = self.access.csrf_cookie(request)
        fresh = cookie is None
        if cookie is None:
            cookie = self.access.new_csrf_cookie()
        context = {
            "root": root_of(request),
            "csrf": self.access.csrf_token(request, cookie),
            "now": utcnow(),
            **context,
        }
        response = self.templates.TemplateResponse(request, name, context, status_code=status)
        if fresh:
            self.access.set_csrf_cookie(response, request, cookie, root_of(request) or "/")
        return response

    def refused(self, connection: HTTPConnection, status: int, reason: str) -> Response:
        """The page that says why a request was refused."""
        return self.render(connection, "refused.html", {"status": status, "reason": reason}, status)


class Invalid:
    """A card's rejected submission: the errors and what was typed, to show again."""

    def __init__(self, question_id: str, errors: Mapping[str, str], typed: Mapping[str, Sequence[str]], note: str):
        self.question_id = question_id
        self.errors = dict(errors)
        self.typed = typed
        self.note = note


CHANGED = "The arguments changed since you saw them: nothing was recorded. Look at them again below."
"""The notice of an approval or a response made on a page that showed arguments someone changed since."""


def page_router(decider: Decider, pages: Pages, live: LiveSignal) -> APIRouter:
    """The page's routes: ``/login`` open to all, the rest behind the login (and forms behind CSRF); the event
    streams wait on ``live``."""
    store, access = decider.store, decider.access

    async def logged_in(request: Request) -> None:
        try:
            await access.require(request, None)
        except NotLoggedIn:
            raise Refused(401, "login") from None
        except Forbidden:
            raise Refused(403, "forbidden") from None
        await access.principal(request)  # who the forms' CSRF tokens are for

    async def form_from_here(request: Request) -> None:
        if not await access.csrf_valid(request, _text(await request.form(), CSRF_FIELD)):
            raise Refused(403, "csrf")

    router = APIRouter(include_in_schema=False)
    seen = APIRouter(dependencies=[Depends(logged_in)])
    posts = APIRouter(dependencies=[Depends(logged_in), Depends(form_from_here)])

    async def inbox_context(
        request: Request, chat: str | None, cursor: str | None = None, invalid: Invalid | None = None
    ) -> dict[str, Any]:
        page = await questions_page(chat, cursor)
        shown = await access.shown(request, page)
        me = await access.principal(request)
        cards = []
        for question in shown:
            refused = await _refusals(question, me)
            if invalid is not None and invalid.question_id == question.id:
                card = views.question_view(question, invalid.typed, invalid.errors, invalid.note, refused)
            else:
                card = views.question_view(question, refusals=refused)
            card.deliveries = await notified(question.id)
            cards.append(card)
        tasks = [views.task_view(waiting) for waiting in await access.shown(request, await store.waiting_tasks(chat))]
        chats = sorted(
            {question.chat_id for question in shown if question.chat_id} | {task.waiting.chat_id for task in tasks}
        )
        if chat and chat not in chats and await access.allowed(request, ChatRef(chat)):
            chats.append(chat)
        return {
            "cards": cards,
            "tasks": tasks,
            "chat": chat,
            "approve_all": _approvable_together(cards, chat) if page.next_cursor is None else 0,
            "can_grant": me is not None and me.verified,
            "chats": chats,
            "query": _query(chat=chat, cursor=cursor),
            "more": _query(chat=chat, cursor=page.next_cursor) if page.next_cursor else None,
        }

    async def notified(question_id: str) -> list[DeliveryRecord]:
        """The deliveries of the question's notices, oldest first, the latest ``DELIVERIES_SHOWN`` of them."""
        return list(reversed(await store.deliveries(question_id=question_id, limit=DELIVERIES_SHOWN)))

    async def _refusals(question: Question, me: Principal | None) -> tuple[str | None, str | None]:
        """Why ``me`` may not approve, and may not decline, ``question`` (its policy's refusals; ``None``: they may)."""
        if question.policy is None:
            return None, None
        # The application's check may block or use a sync verb of the store: it runs on a thread, as deciding does.
        return await asyncio.to_thread(refusals, question, me, store.may_decide)

    async def questions_page(chat: str | None, cursor: str | None) -> QuestionPage:
        try:
            return await store.pending_questions(chat, limit=views.PAGE_SIZE, cursor=cursor)
        except ValueError:  # a cursor the inbox did not make: start at the first page
            return await store.pending_questions(chat, limit=views.PAGE_SIZE)

    @router.get("/login")
    async def login(request: Request, token: str | None = None) -> Response:
        if not access.logs_in:
            return RedirectResponse(f"{root_of(request)}/", status_code=303)
        user = access.login_of(token)
        if user is None:
            return pages.refused(request, 401, "bad-token")
        response = RedirectResponse(f"{root_of(request)}/", status_code=303)
        access.log_in(response, request, root_of(request) or "/", user)
        return response

    @seen.get("/")
    async def inbox(
        request: Request,
        chat: str | None = None,
        outcome: str | None = None,
        question: str | None = None,
        cursor: str | None = None,
    ) -> Response:
        notice = None
        if outcome in NOTICES:
            tone, text = NOTICES[outcome]
            about = await _known(question)
            if about is not None and not await access.allowed(request, about):
                about = None
            notice = {"tone": tone, "text": text, "about": about, "outcome": outcome}
        return pages.render(
            request, "inbox.html", {**await inbox_context(request, chat or None, cursor or None), "notice": notice}
        )

    async def _known(question_id: str | None) -> Question | None:
        if not question_id:
            return None
        try:
            return await store.question(question_id)
        except ValueError:
            return None

    async def chat_context(request: Request, chat_id: str) -> dict[str, Any]:
        if not await access.allowed(request, ChatRef(chat_id)):
            raise Refused(403, "forbidden")
        try:
            messages = await store.messages(chat_id)
        except ChatNotFoundError:
            raise Refused(404, "no-chat") from None
        questions = await access.shown(request, await store.pending_questions(chat_id))
        tasks = await access.shown(request, await store.waiting_tasks(chat_id))
        events = await access.shown(request, await store.history(chat_id))
        return {"chat_id": chat_id, "turns": turns(messages, questions, tasks, events)}

    async def version(chat_id: str) -> int | None:
        try:
            return await store.chat_version(chat_id)
        except ChatNotFoundError:
            return None

    async def fingerprint(request: Request, chat: str | None, cursor: str | None) -> str:
        questions = await access.shown(request, await questions_page(chat, cursor))
        tasks = await access.shown(request, await store.waiting_tasks(chat))
        state = [
            [(question.id, len(question.votes)) for question in questions],  # a vote counted shows at once
            [(task.chat_id, task.since.isoformat(), task.version) for task in tasks],
            await version(chat) if chat and await access.allowed(request, ChatRef(chat)) else None,
        ]
        return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]

    @seen.get("/chats/{chat_id}")
    async def conversation(request: Request, chat_id: str) -> Response:
        return pages.render(request, "chat.html", await chat_context(request, chat_id))

    @seen.get("/fragments/chats/{chat_id}")
    async def conversation_fragment(request: Request, chat_id: str) -> Response:
        return pages.render(request, "_conversation.html", await chat_context(request, chat_id))

    @seen.get("/events")
    async def events(request: Request, chat: str | None = None, cursor: str | None = None) -> Response:
        return StreamingResponse(
            changes(request, lambda: fingerprint(request, chat or None, cursor or None), live.current()),
            media_type="text/event-stream",
        )

    @seen.get("/fragments/inbox")
    async def fragment(request: Request, chat: str | None = None, cursor: str | None = None) -> Response:
        return pages.render(request, "_live.html", await inbox_context(request, chat or None, cursor or None))

    async def posted(request: Request, question_id: str, action: Action) -> Response:
        form = await request.form()  # read once, by the CSRF check; kept by the request
        chat = _text(form, "chat") or None
        note = (_text(form, "note") or "").strip()[:NOTE_LIMIT].replace("\x00", "")
        typed = _typed(form)
        values = {"result": _text(form, "result") or ""} if action == "respond" else _values(typed)
        allow = ALLOW_FOR_AN_HOUR if action == "approve" and _text(form, "allow") == "chat-hour" else None
        seen = _text(form, "seen") or None if action in ("approve", "respond") else None  # the arguments it showed
        if action == "approve":  # an approval's inputs change the call's arguments
            typed, values = typed_arguments(form), changes_of(form)
        try:
            result = await decider.decide(request, question_id, action, values, note or None, allow=allow, seen=seen)
        except (NotLoggedIn, Forbidden):
            raise Refused(403, "forbidden") from None
        if result.outcome in ("invalid", "changed"):
            changed = result.outcome == "changed"  # shown again as it stands now: what was typed was for the old
            invalid = Invalid(question_id, result.errors, {} if changed else typed, note)
            context = await inbox_context(request, chat, invalid=invalid)
            text = CHANGED if changed else "Some answers need another look."
            notice = {"tone": "error", "text": text, "about": result.question, "outcome": result.outcome}
            return pages.render(request, "inbox.html", {**context, "notice": notice}, 409 if changed else 400)
        outcome = "allowed" if allow is not None and result.outcome == "approved" else result.outcome
        query = {"outcome": outcome, "question": question_id}
        if chat:
            query["chat"] = chat
        return RedirectResponse(f"{root_of(request)}/?{urlencode(query)}", status_code=303)

    @posts.post("/questions/{question_id}/answer")
    async def answer(request: Request, question_id: str) -> Response:
        return await posted(request, question_id, "answer")

    @posts.post("/questions/{question_id}/approve")
    async def approve(request: Request, question_id: str) -> Response:
        return await posted(request, question_id, "approve")

    @posts.post("/questions/{question_id}/decline")
    async def decline(request: Request, question_id: str) -> Response:
        return await posted(request, question_id, "decline")

    @posts.post("/questions/{question_id}/respond")
    async def respond(request: Request, question_id: str) -> Response:
        return await posted(request, question_id, "respond")

    @posts.post("/chats/{chat_id}/approve-all")
    async def approve_all(request: Request, chat_id: str) -> Response:
        shown = _shown(await request.form())  # the cards the page showed, each with the digest of its arguments
        try:
            result = await decider.approve_all(request, chat_id, seen=shown)
        except (NotLoggedIn, Forbidden):
            raise Refused(403, "forbidden") from None
        query = {"chat": chat_id, "outcome": f"all-{result.outcome}"}
        if result.stopped is not None:
            query["outcome"] = _stopped_outcome(result.stopped, shown)
            query["question"] = result.stopped.question_id
        return RedirectResponse(f"{root_of(request)}/?{urlencode(query)}", status_code=303)

    @seen.get("/grants")
    async def grants(request: Request, outcome: str | None = None) -> Response:
        await access.principal(request)  # who the revoke forms' CSRF tokens are for
        listed = await decider.shown_grants(request, await store.grants())
        notice = None
        if outcome in GRANT_NOTICES:
            tone, text = GRANT_NOTICES[outcome]
            notice = {"tone": tone, "text": text, "outcome": outcome}
        return pages.render(request, "grants.html", {"grants": listed, "notice": notice})

    @posts.post("/grants/{grant_id}/revoke")
    async def revoke_grant(request: Request, grant_id: str) -> Response:
        revoked = await decider.revoke_grant(request, grant_id)
        return RedirectResponse(f"{root_of(request)}/grants?{urlencode({'outcome': revoked.outcome})}", 303)

    router.include_router(seen)
    router.include_router(posts)
    return router


def _approvable_together(cards: Sequence[views.QuestionView], chat: str | None) -> int:
    """How many of ``chat``'s cards "Approve all in this conversation" would approve: every one of its calls'
    questions, when there are more than one and each is an approval the person may approve whose policy this
    approval completes (else 0, and the page offers no such form)."""
    if chat is None:
        return 0
    of_calls = [card for card in cards if card.question.chat_id == chat and card.question.tool_call is not None]
    together = all(
        card.question.kind == "approval"
        and card.cannot_approve is None
        and (card.question.policy is None or len(card.question.votes) + 1 >= card.question.policy.count)
        for card in of_calls
    )
    return len(of_calls) if together and len(of_calls) > 1 else 0


def _query(**values: str | None) -> str:
    """A query string of the values that are set, with its ``?`` (empty when none is)."""
    given = {key: value for key, value in values.items() if value}
    return f"?{urlencode(given)}" if given else ""


def _shown(form: FormData) -> dict[str, str] | None:
    """The ``seen`` fields of the "approve all" form (``QUESTION_ID=DIGEST`` each) as a mapping; ``None`` for none."""
    entries = [value for value in form.getlist("seen") if isinstance(value, str)]
    if not entries:
        return None
    return dict(entry.partition("=")[::2] for entry in entries)


def _stopped_outcome(stopped: NotDecidableError, shown: Mapping[str, str] | None) -> str:
    """The notice for a turn that one question stopped: by what stopped it."""
    reason = stopped.reason
    if isinstance(reason, ProposalChangedError):
        return "all-changed"
    if shown is not None and stopped.question_id not in shown:
        return "all-unseen"
    if isinstance(reason, QuestionExpiredError):
        return "all-expired"
    return "all-refused" if isinstance(reason, NotAllowedError) else "all-stopped"


def _text(form: FormData, key: str) -> str | None:
    value = form.get(key)
    return value if isinstance(value, str) else None


def _typed(form: FormData) -> dict[str, list[str]]:
    """What the form's fields held, by input name; an unticked checkbox of a shown boolean is ``"false"``."""
    typed = {key: [str(value) for value in form.getlist(key)] for key in form if key.startswith(FIELD_PREFIX)}
    for key in form:
        if key.startswith(SHOWN_PREFIX):
            typed.setdefault(FIELD_PREFIX + key[len(SHOWN_PREFIX) :], ["false"])
    return typed


def _values(typed: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The answer's values: a list when an input sent several (checkbox groups), else its one value."""
    return {
        key[len(FIELD_PREFIX) :]: list(items) if len(items) > 1 else items[0] for key, items in typed.items() if items
    }
