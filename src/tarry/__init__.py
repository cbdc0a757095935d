"""tarry: LLM chats whose tool calls can wait for approvals, answers and work that finishes later."""

from tarry.agents import Agent
from tarry.approvals import Approval
from tarry.chat import Chat
from tarry.messages import Message, ToolCall, Usage
from tarry.principals import Principal
from tarry.questions import Field, Question, Verdict
from tarry.tasks import Task, TaskStatus
from tarry.tools import Tool, tool
from tarry.version import __version__ as __version__

__all__ = [
    "Agent",
    "Approval",
    "Chat",
    "Field",
    "Message",
    "Principal",
    "Question",
    "Task",
    "TaskStatus",
    "Tool",
    "ToolCall",
    "Usage",
    "Verdict",
    "tool",
]
