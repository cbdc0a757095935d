"""The JSON API: list what waits, read a question, answer, approve, decline or respond to it; list, make and
revoke standing grants; list the deliveries of notices and retry one."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Query, Request, Response

from tarry.errors import ChatNotFoundError, NotAllowedError, QuestionExpiredError
from tarry.grants import Allow
from tarry.principals import Principal
from tarry.store.tables import LARGEST_ID
from tarry.web.access import ChatRef, Forbidden, NotLoggedIn
from tarry.web.decisions import NOBODY_GRANTS, Action, Decider, Result
from tarry.web.guard import MAX_BODY
from tarry.web.problems import Problem, problem_responses
from tarry.web.schemas import (
    ApproveAllIn,
    ApproveIn,
    DecisionEventOut,
    DecisionOut,
    DeclineIn,
    DeliveryOut,
    GrantIn,
    GrantOut,
    QuestionOut,
    RespondIn,
    TaskOut,
    TurnOut,
)
from tarry.web.views import PAGE_SIZE

PROBLEM_DETAILS = {
    "unknown": (404, "No question has this id."),
    "taken": (409, "Someone else already decided this question; nothing was changed."),
    "yours": (409, "You already decided this question; nothing was changed."),
    "running": (409, "The call is running right now and can no longer be declined."),
    "expired": (410, "The question's time to live passed before anyone decided it."),
}
API_REFUSALS = {
    "login": "Log in with the link tarry serve printed, or send Authorization: Bearer.",
    "forbidden": "You may not use this inbox.",
    "too-large": f"The request body is larger than {MAX_BODY} bytes.",
}
"""What the API says when a request is refused before it reaches a route, by reason."""
CHAT = Query(default=None, description="Only this chat's.", max_length=200)
LIMIT = Query(default=PAGE_SIZE, ge=1, le=500, description="At most this many questions.")
CURSOR = Query(
    default=None,
    max_length=200,
    description='Where the previous page ended: the cursor of its `Link: <…>; rel="next"` header.',
)


def api_router(decider: Decider) -> APIRouter:
    """The API's routes, to be included under ``/api``: all behind the login, writes behind the CSRF checks."""
    store, access = decider.store, decider.access

    async def logged_in(request: Request) -> None:
        try:
            await access.require(request, None)
        except NotLoggedIn:
            raise Problem(401, API_REFUSALS["login"]) from None
        except Forbidden as error:
            raise Problem(403, error.reason) from None

    async def not_forged(request: Request) -> None:
        if not await access.api_write_allowed(request):
            raise Problem(
                403, "Send the decision as JSON, with an Authorization header, or with the X-CSRF-Token header."
            )

    router = APIRouter(tags=["inbox"], responses=problem_responses(400, 401, 403), dependencies=[Depends(logged_in)])
    writes = APIRouter(dependencies=[Depends(not_forged)], responses=problem_responses(404, 409, 410, 413))

    @router.get(
        "/questions",
        response_model=list[QuestionOut],
        summary="Pending questions, in the order their calls were made, a page at a time",
        description=(
            "One page of at most `limit` questions. When more follow, the response has a "
            '`Link: <…>; rel="next"` header with the URL of the next page.'
        ),
        responses={
            200: {
                "headers": {
                    "Link": {"description": 'The next page, as `<URL>; rel="next"`.', "schema": {"type": "string"}}
                }
            }
        },
    )
    async def list_questions(
        request: Request,
        response: Response,
        chat_id: str | None = CHAT,
        limit: int = LIMIT,
        cursor: str | None = CURSOR,
    ) -> list[QuestionOut]:
        try:
            page = await store.pending_questions(chat_id, limit=limit, cursor=cursor)
        except ValueError as error:
            raise Problem(400, str(error), errors={"cursor": "not a cursor this API gave"}) from None
        if page.next_cursor is not None:
            query = {"limit": limit, "cursor": page.next_cursor} | ({"chat_id": chat_id} if chat_id else {})
            response.headers["Link"] = f'<{request.url.path}?{urlencode(query)}>; rel="next"'
        return [QuestionOut.of(question) for question in await access.shown(request, page)]

    @router.get(
        "/questions/{question_id}",
        response_model=QuestionOut,
        summary="One question, pending or decided",
        responses=problem_responses(404),
    )
    async def get_question(request: Request, question_id: str) -> QuestionOut:
        try:
            question = await store.question(question_id)
        except ValueError:
            raise Problem(404, PROBLEM_DETAILS["unknown"][1], question_id=question_id) from None
        if not await access.allowed(request, question):
            raise Problem(403, "You may not see this question.")
        return QuestionOut.of(question)

    async def decided(
        request: Request,
        question_id: str,
        action: Action,
        values: dict[str, Any] | None,
        note: str | None,
        allow: Allow | None = None,
        seen: str | None = None,
    ) -> DecisionOut:
        try:
            result: Result = await decider.decide(request, question_id, action, values, note, "api", allow, seen)
        except NotLoggedIn:
            raise Problem(401, "Log in first.") from None
        except Forbidden as error:
            raise Problem(403, error.reason) from None
        if result.outcome == "invalid":
            errors = result.errors
            detail = (
                errors.get("identity")
                or errors.get("result")
                or errors.get("allow")
                or errors.get("seen")
                or "The answer does not fit the question."
            )
            raise Problem(400, detail, errors=result.errors, question_id=question_id)
        if result.outcome == "refused":
            raise Problem(403, result.errors["policy"], question_id=question_id)
        if result.outcome == "changed":
            raise Problem(409, result.errors["seen"], question_id=question_id)
        if result.outcome in PROBLEM_DETAILS:
            status, detail = PROBLEM_DETAILS[result.outcome]
            raise Problem(status, detail, question_id=question_id)
        assert result.question is not None
        return DecisionOut(question=QuestionOut.of(result.question))

    @writes.post(
        "/questions/{question_id}/answer",
        response_model=DecisionOut,
        summary="Answer a question with its fields' values",
    )
    async def answer(
        request: Request,
        question_id: str,
        values: dict[str, Any] = Body(  # noqa: B008
            default_factory=dict, description="The fields' values by name; unasked fields are dropped."
        ),
    ) -> DecisionOut:
        return await decided(request, question_id, "answer", values, None)

    @writes.post(
        "/questions/{question_id}/approve",
        response_model=DecisionOut,
        summary="Approve a tool call (or accept a question that needs no values)",
        description=(
            'With `{"arguments": {...}}`, the call with those arguments changed (checked against the question\'s '
            "editable schema). With `{\"allow\": {...}}`, also a standing grant of the call's tool in the question's "
            "scope, made as you in the approval's transaction (a verified identity only: 403 with the shared token). "
            'With `{"seen": proposal_digest}`, only if the arguments are still those you saw: 409 when someone '
            "changed them since, nothing recorded."
        ),
    )
    async def approve(request: Request, question_id: str, body: ApproveIn | None = None) -> DecisionOut:
        allow = None
        if body is not None and body.allow is not None:
            try:
                allow = body.allow.to_allow()
            except ValueError as error:
                raise Problem(400, str(error), errors={"allow": str(error)}, question_id=question_id) from None
        changes = body.arguments if body is not None else None
        seen = body.seen if body is not None else None
        return await decided(request, question_id, "approve", changes, None, allow, seen)

    @writes.post(
        "/questions/{question_id}/decline",
        response_model=DecisionOut,
        summary="Decline a question; the note reaches the model",
    )
    async def decline(request: Request, question_id: str, body: DeclineIn | None = None) -> DecisionOut:
        return await decided(request, question_id, "decline", None, body.note if body is not None else None)

    @writes.post(
        "/questions/{question_id}/respond",
        response_model=DecisionOut,
        summary="Give the result of a call waiting for approval, in place of running its tool",
        description=(
            "The tool never runs: the model reads `result` as given by a person. Only for the approval a call waits "
            "on before it runs (400 otherwise); it needs what a decline needs of the approval's policy. With "
            '`"seen": proposal_digest`, only if the arguments are still those you saw: 409 when they changed since.'
        ),
    )
    async def respond(request: Request, question_id: str, body: RespondIn) -> DecisionOut:
        return await decided(request, question_id, "respond", {"result": body.result}, None, seen=body.seen)

    @writes.post(
        "/chats/{chat_id}/approve-all",
        response_model=TurnOut,
        summary="Approve every question a chat's waiting calls wait on, all or none",
        description=(
            "One transaction: if one question cannot be approved, none is, nothing goes on the audit trail, and "
            "the problem's `question_id` names it (403 its policy refuses you, 410 it expired, 409 a form, a "
            "link, or an approval your vote would only count). No question waiting: `questions` is empty. "
            'With `{"seen": {question_id: proposal_digest, ...}}` (the questions you were shown), 409 when one\'s '
            "arguments changed since or a question of the turn is not among them."
        ),
    )
    async def approve_all(request: Request, chat_id: str, body: ApproveAllIn | None = None) -> TurnOut:
        seen = body.seen if body is not None else None
        try:
            result = await decider.approve_all(request, chat_id, "api", seen)
        except NotLoggedIn:
            raise Problem(401, "Log in first.") from None
        except Forbidden as error:
            raise Problem(403, error.reason) from None
        if result.outcome == "unknown":
            raise Problem(404, "No chat has this id.", chat_id=chat_id)
        if result.outcome == "invalid":
            detail = result.errors.get("identity") or result.errors["seen"]
            raise Problem(400, detail, errors=result.errors, chat_id=chat_id)
        stopped = result.stopped
        if stopped is not None:
            reason = stopped.reason
            status = (
                403 if isinstance(reason, NotAllowedError) else 410 if isinstance(reason, QuestionExpiredError) else 409
            )
            raise Problem(status, str(stopped), chat_id=chat_id, question_id=stopped.question_id)
        return TurnOut(questions=[QuestionOut.of(question) for question in result.approved])

    @router.get("/tasks", response_model=list[TaskOut], summary="Paused tasks: work that finishes later")
    async def list_tasks(request: Request, chat_id: str | None = CHAT) -> list[TaskOut]:
        return [TaskOut.of(waiting) for waiting in await access.shown(request, await store.waiting_tasks(chat_id))]

    @router.get(
        "/history",
        response_model=list[DecisionEventOut],
        summary="The audit trail: every attempt to decide, oldest first",
    )
    async def history(
        request: Request,
        chat_id: str | None = CHAT,
        question_id: str | None = Query(default=None, description="Only this question's.", max_length=200),
        after: int | None = Query(default=None, description="Only events after this event id.", ge=0, le=LARGEST_ID),
        limit: int = Query(default=100, description="At most this many events.", ge=1, le=1000),
    ) -> list[DecisionEventOut]:
        events = await store.history(chat_id, question_id, after=after, limit=limit)
        return [DecisionEventOut.of(event) for event in await access.shown(request, events)]

    async def granter(request: Request) -> Principal:
        """Who a grant of this request is made or revoked as; a problem when nobody the store can record."""
        problem = await access.identity_problem(request)
        if problem is not None:
            raise Problem(400, problem, errors={"identity": problem})
        by = await access.principal(request)
        if by is None:
            raise Problem(403, NOBODY_GRANTS)
        return by

    @router.get("/grants", response_model=list[GrantOut], summary="Standing grants, oldest first")
    async def list_grants(
        request: Request,
        include_ended: bool = Query(default=False, description="Also revoked and expired grants."),
    ) -> list[GrantOut]:
        listed = await store.grants(include_ended=include_ended)
        return [GrantOut.of(grant) for grant in await decider.shown_grants(request, listed)]

    @writes.post(
        "/grants",
        response_model=GrantOut,
        status_code=201,
        summary="Make a standing grant: matching calls are approved at once, as you",
        description=(
            "Needs a verified identity (403 with the shared token). A call the grant matches is still judged by its "
            "approval policy, with you as the approver: a policy that does not admit you refuses it."
        ),
    )
    async def add_grant(request: Request, body: GrantIn) -> GrantOut:
        by = await granter(request)
        if body.chat_id is not None and not await access.allowed(request, ChatRef(body.chat_id)):
            raise Problem(403, "You may not see this chat.", chat_id=body.chat_id)
        try:
            made = await store.grant(
                body.tool,
                by=by,
                chat_id=body.chat_id,
                agent=body.agent,
                equal=body.equal,
                within=body.within,
                ttl=body.ttl,
            )
        except NotAllowedError as error:
            raise Problem(403, str(error)) from None
        except ChatNotFoundError:
            raise Problem(404, "No chat has this id.", chat_id=body.chat_id) from None
        except ValueError as error:
            raise Problem(400, str(error)) from None
        return GrantOut.of(made)

    @writes.post("/grants/{grant_id}/revoke", response_model=GrantOut, summary="Revoke a standing grant")
    async def revoke_grant(request: Request, grant_id: str) -> GrantOut:
        revoked = await decider.revoke_grant(request, grant_id)
        if revoked.outcome == "invalid":
            raise Problem(400, str(revoked.problem), errors={"identity": str(revoked.problem)})
        if revoked.outcome == "nobody":
            raise Problem(403, NOBODY_GRANTS)
        if revoked.grant is None:
            raise Problem(404, "No grant has this id.", grant_id=grant_id)
        return GrantOut.of(revoked.grant)

    @router.get(
        "/deliveries",
        response_model=list[DeliveryOut],
        summary="Deliveries of notices (webhooks, emails, messages), newest first, with their state and last error",
    )
    async def list_deliveries(
        request: Request,
        state: Literal["pending", "sent", "failed"] | None = Query(default=None, description="Only those in it."),
        question_id: str | None = Query(default=None, description="Only this question's.", max_length=200),
        limit: int = Query(default=100, description="At most this many.", ge=1, le=1000),
    ) -> list[DeliveryOut]:
        listed = await store.deliveries(state=state, question_id=question_id, limit=limit)
        return [DeliveryOut.of(one) for one in listed if await access.allowed(request, ChatRef(one.chat_id))]

    @writes.post(
        "/deliveries/{delivery_id}/retry",
        response_model=DeliveryOut,
        summary="Make a delivery due now, with a fresh count of attempts (one sent already stays as it is)",
    )
    async def retry_delivery(request: Request, delivery_id: str) -> DeliveryOut:
        found = await store.delivery(delivery_id)
        if found is None or not await access.allowed(request, ChatRef(found.chat_id)):
            raise Problem(404, "No delivery has this id.", delivery_id=delivery_id)
        return DeliveryOut.of(await store.retry_delivery(delivery_id))

    router.include_router(writes)
    return router
