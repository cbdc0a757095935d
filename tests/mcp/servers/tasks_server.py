"""A fastmcp-tasks (SEP-2663) server for tarry's tests: a task tool that asks a question while it runs."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

server = FastMCP("tasks")
server.add_extension(TasksExtension(url="memory://"))


POLL = timedelta(milliseconds=int(os.environ.get("TASKS_POLL_MS", "500")))  # the pollIntervalMs tasks report


@server.tool(task=TaskConfig(mode="optional", poll_interval=POLL))
async def survey(topic: str, ctx: Context) -> str | InputRequiredResult:
    """Asks for a rating as a task (the guard pattern: input requests, then a re-run with the answers)."""
    responses = ctx.input_responses or {}
    answer = responses.get("rating")
    if answer is None:
        schema = {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}}}
        params = ElicitRequestFormParams(message=f"Rate {topic} from 1 to 5", requested_schema=schema)
        return InputRequiredResult(input_requests={"rating": ElicitRequest(params=params)})
    if answer.action != "accept" or not answer.content:
        return f"No rating for {topic} ({answer.action})"
    return f"{topic} rated {answer.content['stars']}"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
