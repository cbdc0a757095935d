"""Importing a provider's SDK only when an adapter needs it."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise an ``ImportError`` that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"This model adapter needs the {module!r} package: pip install 'tarry[{extra}]'") from error
