"""`tarry[gemini]` alone: the Gemini adapter speaks generateContent to a local server."""

from __future__ import annotations

from provider import ANSWER, check

from tarry.models import Gemini


def response(part: dict[str, object]) -> dict[str, object]:
    """A GenerateContentResponse as the API reference documents it."""
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 5, "totalTokenCount": 25},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-1",
    }


REPLIES = [
    response({"functionCall": {"name": "weather", "args": {"city": "Lyon"}}}),
    response({"text": ANSWER}),
]


def tool_result_sent(body: dict[str, object]) -> bool:
    (part,) = body["contents"][-1]["parts"]
    reply = part["functionResponse"]
    return reply["name"] == "weather" and "sunny" in str(reply["response"])


if __name__ == "__main__":
    check(
        "gemini",
        REPLIES,
        lambda base_url: Gemini("gemini-2.5-flash", api_key="extras", base_url=base_url),
        ":generateContent",
        tool_result_sent,
    )
