"""The pages a signed link from an email opens: ``GET /links/{token}`` shows the question and asks to confirm;
only the form's ``POST`` decides (mail scanners open links, and must decide nothing).

The link is the proof of who decides: its principal, verified, through the channel ``email``, by the same
[`Decider`][tarry.web.decisions.Decider] and store path as the inbox, so the rules and the policy apply. The form
carries a value signed for this link and for a random cookie the page set (a double submit): another site can
neither read the value nor send the cookie along.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from tarry.clock import utcnow
from tarry.errors import UnknownQuestionError
from tarry.mail.compose import decision_text
from tarry.mail.links import Link, LinkRefused, LinkSigner
from tarry.questions import Question
from tarry.web import views
from tarry.web.access import cookie_name, same_origin
from tarry.web.decisions import Decider, Result
from tarry.web.pages import NOTE_LIMIT, Pages, _text, _typed, _values, root_of

LINK_FIELD = "link_csrf"
"""The hidden field of a link page's form: the value signed for the link and the browser's cookie."""
COOKIE = "tarry_link"
DONE = {
    "answered": "Your answer was recorded.",
    "approved": "Approved. The call runs when a process carries the chat on.",
    "declined": "Declined.",
    "counted": "Your approval was counted. The call needs more people's approval before it runs.",
}
"""What the page says after a decision this link recorded, by outcome."""
STATUS = {"tampered": 400, "expired": 410, "csrf": 403, "unknown": 404, "lapsed": 410, "refused": 403}
"""The status of each refusal the link page explains."""


def link_router(decider: Decider, pages: Pages, signer: LinkSigner) -> APIRouter:
    """``GET`` and ``POST /links/{token}``, outside the inbox's login: the signed link is the proof."""
    router = APIRouter(include_in_schema=False)
    store = decider.store

    def render(request: Request, context: dict[str, Any], status: int = 200) -> Response:
        defaults: dict[str, Any] = {**dict.fromkeys(("question", "card", "link", "why", "said")), "errors": {}}
        defaults["token_path"] = quote(str(request.path_params.get("token", "")), safe="")
        return pages.render(request, "link.html", {**defaults, **context}, status)

    def refused(request: Request, why: str, question: Question | None = None, link: Link | None = None) -> Response:
        return render(request, {"state": "refused", "why": why, "question": question, "link": link}, STATUS[why])

    async def opened(request: Request, token: str) -> tuple[Link, Question] | Response:
        try:
            link = signer.read(token)
        except LinkRefused as error:
            return refused(request, error.reason, link=error.link)
        try:
            question = await store.question(link.question_id)
        except UnknownQuestionError:
            return refused(request, "unknown", link=link)
        return link, question

    def shown(request: Request, token: str, link: Link, question: Question, card: views.QuestionView) -> Response:
        if question.verdict is not None:
            return render(request, {"state": "decided", "question": question, "said": decision_text(question)})
        if question.expired(utcnow()):
            return refused(request, "lapsed", question, link)
        nonce = request.cookies.get(cookie_name(request, COOKIE)) or secrets.token_urlsafe(24)
        context = {"state": "confirm", "link": link, "question": question, "card": card}
        status = 400 if card.errors else 200
        response = render(request, {**context, "form_token": signer.form_token(token, nonce)}, status)
        secure = request.url.scheme == "https"
        path = "/" if secure else f"{root_of(request)}/links/"
        response.set_cookie(
            cookie_name(request, COOKIE), nonce, httponly=True, samesite="strict", secure=secure, path=path
        )
        return response

    @router.get("/links/{token}")
    async def show(request: Request, token: str) -> Response:
        found = await opened(request, token)
        if isinstance(found, Response):
            return found
        link, question = found
        return shown(request, token, link, question, views.question_view(question))

    @router.post("/links/{token}")
    async def decide(request: Request, token: str) -> Response:
        found = await opened(request, token)
        if isinstance(found, Response):
            return found
        link, question = found
        form = await request.form()
        nonce = request.cookies.get(cookie_name(request, COOKIE))
        if not same_origin(request) or not signer.form_valid(token, nonce, _text(form, LINK_FIELD)):
            return refused(request, "csrf", question, link)
        note = (_text(form, "note") or "").strip()[:NOTE_LIMIT].replace("\x00", "")
        typed = _typed(form)
        values = _values(typed) if link.action == "answer" and question.kind == "form" else None
        by = replace(link.principal, verified=True)
        result = await decider.decide_as(question.id, link.action, by, "email", values, note or None)
        return outcome(request, token, link, question, result, typed, note)

    def outcome(
        request: Request,
        token: str,
        link: Link,
        question: Question,
        result: Result,
        typed: dict[str, list[str]],
        note: str,
    ) -> Response:
        now = result.question or question
        if result.outcome == "invalid":
            return shown(request, token, link, question, views.question_view(question, typed, result.errors, note))
        if result.recorded:
            return render(request, {"state": "done", "question": now, "said": DONE[result.outcome]})
        if result.outcome in ("taken", "yours"):
            return render(request, {"state": "decided", "question": now, "said": decision_text(now)}, 409)
        if result.outcome == "expired":
            return refused(request, "lapsed", now, link)
        if result.outcome == "unknown":
            return refused(request, "unknown", None, link)
        return render(request, {"state": "refused", "why": "refused", "question": now, "errors": result.errors}, 403)

    return router
