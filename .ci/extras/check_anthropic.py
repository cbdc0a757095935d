"""`tarry[anthropic]` alone: the Anthropic adapter speaks the Messages API to a local server."""

from __future__ import annotations

from provider import ANSWER, check

from tarry.models import Anthropic


def message(content: list[dict[str, object]], stop: str) -> dict[str, object]:
    """A Message object as the API reference documents it."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5},
    }


REPLIES = [
    message([{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Lyon"}}], "tool_use"),
    message([{"type": "text", "text": ANSWER}], "end_turn"),
]


def tool_result_sent(body: dict[str, object]) -> bool:
    (block,) = body["messages"][-1]["content"]
    return block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1" and "sunny" in str(block["content"])


if __name__ == "__main__":
    check(
        "anthropic",
        REPLIES,
        lambda base_url: Anthropic("claude-sonnet-4-5", api_key="sk-ant-extras", base_url=base_url),
        "/v1/messages",
        tool_result_sent,
    )
