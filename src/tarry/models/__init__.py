"""Model adapters for real providers, each built on the provider's official SDK (installed as an extra).

``Chat(model="openai:gpt-4.1-mini")`` resolves a ``"provider:model"`` string through the
``tarry.providers`` entry points (``openai``, ``anthropic``, ``gemini``, ``ollama``); the
classes here give full control. Importing this package imports no SDK: each adapter imports
its own when it is made, and a missing one raises an ``ImportError`` naming the extra.
"""

from tarry.models.anthropic import Anthropic
from tarry.models.gemini import Gemini
from tarry.models.openai import OpenAI, OpenAICompatible, ollama

__all__ = ["Anthropic", "Gemini", "OpenAI", "OpenAICompatible", "ollama"]
