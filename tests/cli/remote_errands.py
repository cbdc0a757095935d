"""The tools ``tarry mcp serve --stdio`` serves to ``tarry chat --mcp`` in the CLI tests (copied beside the chat).

``refund`` needs an approval, which tarry's server asks its client as an elicitation with no
fields; each refund that runs appends a line to ``refunds.log`` in the server's working directory.
"""

from __future__ import annotations

from pathlib import Path

from tarry import Tool


class Refund(Tool):
    """Refunds an order; the MCP client approves each refund."""

    requires_approval = True

    def execute(self, order: str) -> str:
        with Path("refunds.log").open("a") as log:
            log.write(f"{order}\n")
        return f"Refunded {order}."


TOOLS = [Refund()]
