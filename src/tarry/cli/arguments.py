"""What the ``tarry`` command's options take: argparse types, and the import path ``module:name`` options use."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def importable_working_directory() -> None:
    """Put the working directory first on the import path, as ``python -m`` and ``celery -A`` do.

    The console script's import path holds its own folder, not the directory it runs in, so
    ``--agents agents:support`` would not find ``./agents.py`` otherwise.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def identity_text(text: str) -> str:
    """An argparse type: a name to decide as, not empty (an empty one would silently mean nobody)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a name to decide as cannot be empty")
    return text


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def json_pairs(pairs: list[str], option: str) -> dict[str, Any]:
    """``option NAME=VALUE`` options (``--setting``, ``--equal``) as a dict: each value read as JSON when it parses
    (``5``, ``true``, ``"5"``), else as text; raises ``ValueError`` for one without ``NAME=``."""
    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{option} takes NAME=VALUE, got {pair!r}")
        try:
            values[name] = json.loads(text)
        except ValueError:
            values[name] = text
    return values
