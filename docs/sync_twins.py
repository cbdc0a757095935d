"""A griffe extension for the API reference: each ``x_sync = sync_twin(x)`` of a class is shown as a method.

The twins are made at import time (``tarry.running.sync_twin``), so the source holds only an
assignment, which mkdocstrings would show as an attribute without a docstring. This shows each as
the method it is: the async method's parameters, what it returns, and a docstring naming it.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

from tarry.running import twin_docstring

TWIN = re.compile(r"sync_twin\((\w+)\)")


class SyncTwins(griffe.Extension):
    """Turns each class attribute ``name = sync_twin(method)`` into a documented blocking method."""

    def on_class_members(self, *, node: ast.AST | griffe.ObjectNode, cls: griffe.Class, **kwargs: Any) -> None:
        for name, member in list(cls.members.items()):
            if not isinstance(member, griffe.Attribute):
                continue
            match = TWIN.fullmatch(str(member.value))
            method = cls.members.get(match.group(1)) if match else None
            if not isinstance(method, griffe.Function):
                continue
            twin = griffe.Function(
                name,
                lineno=member.lineno,
                endlineno=member.endlineno,
                parameters=method.parameters,
                returns=method.returns,
                docstring=griffe.Docstring(
                    twin_docstring(method.name, method.path),
                    parser=method.docstring.parser if method.docstring else None,
                ),
            )
            cls.set_member(name, twin)
