"""The API reference (docs/reference, built by mkdocstrings) covers every public module;
every public name has a docstring; no docstring holds a Sphinx role the site would show raw.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import tarry

ROOT = Path(__file__).resolve().parents[1]
# The site renders Markdown docstrings: a cross-reference is [`Store`][tarry.store.Store], never :class:`Store`.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|attr|data|const|obj|mod|exc|ref|doc|term|any):`[^`]*`")
MODULES = [
    "tarry",
    "tarry.store",
    "tarry.messages",
    "tarry.tools",
    "tarry.fields",
    "tarry.models",
    "tarry.mcp",
    "tarry.mcp_server",
    "tarry.mcp.legacy_tasks",
    "tarry.mcp.task_extension",
    "tarry.jobs",
    "tarry.bridges",
    "tarry.bridges.pydantic_ai",
    "tarry.web",
    "tarry.testing",
    "tarry.errors",
    "tarry.approvals",
    "tarry.grants",
    "tarry.principals",
    "tarry.clock",
    "tarry.mail",
]


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(value) or inspect.isfunction(value))
            and value.__module__ == module_name
        ]
    return list(names)


def undocumented(module_name: str) -> list[str]:
    """Public names of a module, and the public methods and properties their classes define, without a docstring."""
    module = importlib.import_module(module_name)
    missing = []
    for name in public_names(module_name):
        value = getattr(module, name)
        # Type aliases carry their docstring in the source (mkdocstrings reads it there), not in __doc__.
        if (inspect.isclass(value) or inspect.isfunction(value)) and not (value.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                function = attribute.fget if isinstance(attribute, property) else attribute
                if isinstance(function, staticmethod | classmethod):
                    function = function.__func__
                if member.startswith("_") or not inspect.isfunction(function):
                    continue
                if not (function.__doc__ or "").strip():
                    missing.append(f"{name}.{member}")
    return missing


@pytest.mark.parametrize("module_name", MODULES)
def test_each_public_module_has_a_reference_page_in_the_site(module_name: str) -> None:
    page = ROOT / "docs" / "reference" / f"{module_name.removeprefix('tarry.') if '.' in module_name else 'tarry'}.md"
    assert f"::: {module_name}\n" in page.read_text(encoding="utf-8")
    assert str(page.relative_to(ROOT / "docs")) in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    assert undocumented(module_name) == []


def test_every_guide_page_is_in_the_site() -> None:
    site = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f": {page.name}\n" in site, f"mkdocs.yml does not list docs/{page.name}"


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """Each string statement of a source file (the docstrings of its module, classes, functions and attributes)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def runtime_docstrings(module_name: str) -> Iterator[tuple[str, str]]:
    """The ``__doc__`` of each public name of a module and of its classes' members, made at import time too."""
    module = importlib.import_module(module_name)
    for name in public_names(module_name):
        value = getattr(module, name)
        yield f"{module_name}.{name}", inspect.getdoc(value) or ""
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                if not member.startswith("_"):
                    yield f"{module_name}.{name}.{member}", inspect.getdoc(attribute) or ""


def test_no_docstring_holds_a_sphinx_role() -> None:
    left = [
        f"{path.relative_to(ROOT)}:{line + text.count(chr(10), 0, role.start())}: {role.group(0)}"
        for path in sorted((ROOT / "src" / "tarry").rglob("*.py"))
        for line, text in docstrings(path)
        for role in SPHINX_ROLE.finditer(text)
    ]
    left += [
        f"{where}: {role.group(0)}"
        for module_name in MODULES
        for where, text in runtime_docstrings(module_name)
        for role in SPHINX_ROLE.finditer(text)
    ]
    assert not left, "Sphinx roles the site shows raw; write [`Name`][dotted.path] instead:\n" + "\n".join(left)


def test_each_sync_twin_is_a_documented_method_on_the_site() -> None:
    """The site reads the source, where ``ask_sync = sync_twin(ask)`` is a bare assignment: docs/sync_twins.py,
    the griffe extension mkdocs.yml names, shows each twin as a method with the async one's parameters."""
    griffe = pytest.importorskip("griffe", reason="the docs extra installs griffe")
    assert "extensions: [docs/sync_twins.py]" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    package = griffe.load(
        "tarry", search_paths=[ROOT / "src"], extensions=griffe.load_extensions(str(ROOT / "docs" / "sync_twins.py"))
    )
    twins = {
        f"{cls}.{name}": member
        for cls in ("chat.Chat", "store.Store")
        for name, member in package[cls].members.items()
        if name.endswith("_sync")
    }
    assert "chat.Chat.ask_sync" in twins and "store.Store.start_chat_sync" in twins
    for path, twin in twins.items():
        method = package[path.removesuffix("_sync")]
        assert twin.is_function, f"{path} is shown as a {twin.kind.value}"
        assert twin.docstring is not None and twin.docstring.value.startswith(f"Blocking form of [`{method.name}`]")
        assert [p.name for p in twin.parameters] == [p.name for p in method.parameters]
        assert "async" not in twin.labels
    assert tarry.Chat.ask_sync.__doc__.startswith("Blocking form of [`ask`][tarry.chat.Chat.ask]")  # help() says it too
