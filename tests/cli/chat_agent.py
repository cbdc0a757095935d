"""The agent that ``tarry chat --agent`` runs in the CLI tests: a scripted model and four kinds of waiting tool.

The model reads only the transcript, so a resumed chat in a new process carries on with a fresh one.
What the user says picks the tool: "pay" needs an approval, "share" two people's, "book" asks a form, "login" asks a
URL, "render" returns a task that moves on by half at each check, "mcp" books through the MCP
booking server of the MCP tests (given with ``--mcp``), "refund" asks for the approval of tarry's
own MCP server (``remote_errands.py`` behind ``tarry mcp serve``), "everything" asks server-everything's form,
"outage" fails the model request.
"""

from __future__ import annotations

from tarry import Agent, Approval, Task, Tool
from tarry.demo import BookTable
from tarry.errors import ProviderError
from tarry.messages import Message
from tarry.testing import ScriptedModel


class TransferMoney(Tool):
    """Moves money to someone; a person approves every transfer."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        return f"Sent {amount} EUR to {to}."


class SharedTransfer(TransferMoney):
    """Moves money to someone; two people approve every shared transfer."""

    requires_approval = Approval(count=2)


class Login(Tool):
    """Sends the person to a login page."""

    def execute(self, site: str) -> Task:
        return self.ask("Sign in to go on", url=f"https://{site}/login?next=/home")

    def resume(self, task: Task, site: str) -> str:
        return f"Signed in to {site}."


class RenderVideo(Tool):
    """Renders a video in the background; each check moves it on by half."""

    def execute(self, name: str) -> Task:
        return Task(status_message="queued", poll_interval=0.2, data={"progress": 0})

    def resume(self, task: Task, name: str) -> str | Task:
        progress = int(task.data["progress"]) + 50
        if progress >= 100:
            return f"{name}.mp4 is ready."
        return Task(status_message=f"rendering, {progress}% done", poll_interval=0.2, data={"progress": progress})


def turn(messages: list[Message]) -> str | list[dict[str, object]]:
    """Call the tool the user's words name, then sum up the results."""
    last = messages[-1]
    if last.role == "tool":
        return "Done: " + last.content
    text = last.content.lower()
    if "mcp" in text:  # the book tool of tests/mcp/servers/booking.py, given with --mcp
        return [{"name": "book", "arguments": {"restaurant": "Luigi's"}}]
    if "outage" in text:
        raise ProviderError("the provider is down", provider="scripted", status=503)
    if "refund" in text:  # the refund tool of remote_errands.py, served by `tarry mcp serve --stdio` given with --mcp
        return [{"name": "refund", "arguments": {"order": "A-17"}}]
    if "everything" in text:  # server-everything's form of every field kind, pushed while the call runs
        return [{"name": "trigger-elicitation-request", "arguments": {}}]
    if "share" in text:
        return [{"name": "shared_transfer", "arguments": {"amount": 20, "to": "Bob"}}]
    if "pay" in text:
        return [{"name": "transfer_money", "arguments": {"amount": 20, "to": "Bob"}}]
    if "book" in text:
        return [{"name": "book_table", "arguments": {"restaurant": "Luigi's"}}]
    if "login" in text:
        return [{"name": "login", "arguments": {"site": "bücher.example"}}]
    if "render" in text:
        return [{"name": "render_video", "arguments": {"name": "holiday"}}]
    return f"You said: {last.content}"


agent = Agent(
    "cli-test",
    model=lambda: ScriptedModel([turn] * 100, name="cli-test"),
    tools=[TransferMoney(), SharedTransfer(), BookTable(), Login(), RenderVideo()],
    instructions="You run errands.",
)
