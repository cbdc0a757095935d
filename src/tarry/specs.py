"""Objects named by ``package.module:name`` specs, as ``tarry``'s options take them."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SpecError", "load_spec"]


class SpecError(ValueError):
    """A ``package.module:name`` spec that names nothing importable; the message says what is wrong."""


def load_spec(spec: str, option: str) -> Any:
    """The object ``spec`` names, for the command-line ``option`` that gave it.

    Raises ``SpecError`` for a malformed spec, a module that cannot be imported, or a
    module without the name. Other errors raised while the module is imported (a bug in it)
    propagate with their traceback.

    >>> load_spec("json:dumps", "--tools").__name__
    'dumps'
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SpecError(f"{option} looks like 'package.module:name', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        where = "" if error.name == module_name else f" (importing it raised: {error})"
        missing = f"no module named {module_name!r}" if not where else f"{module_name!r} cannot be imported"
        raise SpecError(
            f"{option} {spec}: {missing}{where}; run tarry from the folder that holds it, or install it"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SpecError(f"{option} {spec}: the module {module_name!r} has no {attribute!r}") from None
