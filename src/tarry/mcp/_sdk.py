"""The one check that the MCP SDK is installed."""

from __future__ import annotations


def require_sdk() -> None:
    """Raise an ``ImportError`` naming ``tarry[mcp]`` when the ``mcp`` SDK is missing."""
    try:
        import mcp  # noqa: F401
    except ImportError as error:
        raise ImportError("tarry.mcp needs the MCP SDK: install it with  pip install 'tarry[mcp]'") from error
