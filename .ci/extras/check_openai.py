"""`tarry[openai]` alone: the OpenAI adapter speaks Chat Completions to a local server."""

from __future__ import annotations

import json

from provider import ANSWER, check

from tarry.models import OpenAI


def completion(message: dict[str, object], finish: str) -> dict[str, object]:
    """A chat.completion object as the API reference documents it."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": json.dumps({"city": "Lyon"})},
}
REPLIES = [
    completion({"role": "assistant", "content": None, "tool_calls": [CALL]}, "tool_calls"),
    completion({"role": "assistant", "content": ANSWER}, "stop"),
]


def tool_result_sent(body: dict[str, object]) -> bool:
    return {"role": "tool", "tool_call_id": "call_1", "content": "Lyon: sunny, 24 °C"}.items() <= body["messages"][
        -1
    ].items()


if __name__ == "__main__":
    check(
        "openai",
        REPLIES,
        lambda base_url: OpenAI("gpt-4.1-mini", api_key="sk-extras", base_url=f"{base_url}/v1"),
        "/v1/chat/completions",
        tool_result_sent,
    )
