"""Who decides from a shell, and the deployment's check of who may: the OS user, ``--as``, ``--may-decide``."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable
from typing import Any

from tarry.cli.arguments import importable_working_directory
from tarry.principals import Principal
from tarry.specs import SpecError, load_spec
from tarry.store import Store

__all__ = ["MAY_DECIDE_VARIABLE", "configured_may_decide", "decider", "install_may_decide", "load_function", "os_user"]

MAY_DECIDE_VARIABLE = "TARRY_MAY_DECIDE"
"""The variable naming the deployment's ``may_decide`` (``module:function``) when ``--may-decide`` does not."""


def os_user() -> Principal:
    """Who runs this process, as the operating system knows them: verified, since the OS logged them in.

    The account of the process's real user id, not ``$USER`` or ``$LOGNAME``, which the caller
    sets; where there are no user ids (Windows), the name ``getpass`` finds, self-declared.
    """
    try:
        import pwd

        return Principal(pwd.getpwuid(os.getuid()).pw_name)
    except (ImportError, KeyError):
        return Principal(getpass.getuser(), verified=False)


def decider(arguments: argparse.Namespace, store: Store) -> Principal:
    """Who a decision command decides as, and installs the deployment's ``may_decide`` on the store.

    The OS user running the command, verified; ``--as NAME`` is a claim nobody checked
    (self-declared), unless it names that very OS user. The check comes from ``--may-decide``,
    else the ``TARRY_MAY_DECIDE`` variable.
    """
    install_may_decide(store, arguments.may_decide)
    me = os_user()
    if arguments.by is None or arguments.by == me.id:
        return me
    return Principal(arguments.by, verified=False)


def configured_may_decide(spec: str | None) -> Callable[..., Any] | None:
    """The deployment's ``may_decide``: the function ``spec`` names, else ``TARRY_MAY_DECIDE``'s, else ``None``."""
    spec = spec or os.environ.get(MAY_DECIDE_VARIABLE)
    return load_function(spec) if spec else None


def install_may_decide(store: Store, spec: str | None) -> None:
    """Give ``store`` the deployment's ``may_decide`` (``configured_may_decide``), when there is one."""
    found = configured_may_decide(spec)
    if found is not None:
        store.may_decide = found


def load_function(spec: str) -> Callable[..., Any]:
    """The function a ``module:name`` spec names (the working directory is importable)."""
    importable_working_directory()
    found = load_spec(spec, "--may-decide")
    if not callable(found):
        raise SpecError(f"--may-decide {spec} is {found!r}, not a function")
    return found  # type: ignore[no-any-return]
