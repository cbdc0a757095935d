"""Every ```python block of README.md and docs/*.md runs.

Each README block is a whole program: it runs as a file of its own, with ``python``, so a block that
needs another block, or uses ``await`` outside a function, fails. The blocks of a docs/ page run page
by page in one namespace per page and may use top-level ``await``. A page whose examples another test
runs with its own fixtures (that test names ``docs/<page>``) is left to that test.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import tarry

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
CONCEPT_PAGES = ["chat-loop.md", "tools.md", "approvals.md", "tasks.md", "questions.md"]
HERE = Path(__file__).resolve()


def run_elsewhere(page: Path) -> Path | None:
    """The test that runs ``page``'s examples with fixtures of its own (say, recorded provider responses), if any."""
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        if test.resolve() != HERE and f"docs/{page.name}" in test.read_text(encoding="utf-8"):
            return test
    return None


PAGES = sorted(page for page in (ROOT / "docs").glob("*.md") if not run_elsewhere(page))
README = ROOT / "README.md"


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """Each block's first line number in the page and its code."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in BLOCK.finditer(text)]


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
async def test_the_examples_of_a_page_run(page: Path) -> None:
    blocks = python_blocks(page)
    if page.name in CONCEPT_PAGES:
        assert blocks, f"{page.name} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for line, code in blocks:
        # Pad so a failure's traceback points at the line of the page.
        source = "\n" * (line - 1) + code
        compiled = compile(source, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(compiled, namespace)
        if inspect.iscoroutine(result):
            await result


README_BLOCKS = python_blocks(README)


@pytest.mark.parametrize(("line", "code"), README_BLOCKS, ids=[f"README.md:{line}" for line, _ in README_BLOCKS])
def test_each_readme_example_runs_as_a_file(line: int, code: str, tmp_path: Path) -> None:
    program = tmp_path / "example.py"
    program.write_text(code, encoding="utf-8")
    # The tarry these tests import, whichever checkout that is.
    source = str(Path(tarry.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path, "TARRY_SRC": source},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"README.md's example at line {line} failed as a file:\n{run.stderr}"


def test_the_readme_has_python_examples() -> None:
    assert len(README_BLOCKS) >= 4


def test_concept_pages_are_run_here() -> None:
    for name in CONCEPT_PAGES:
        assert ROOT / "docs" / name in PAGES


def test_each_concept_has_a_page_linked_from_the_readme() -> None:
    readme = README.read_text(encoding="utf-8")
    for name in CONCEPT_PAGES:
        assert (ROOT / "docs" / name).exists(), f"docs/{name} is missing"
        assert f"(docs/{name})" in readme, f"README.md does not link docs/{name}"


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```(?:sh|bash|console)\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match, "the Quick start has no shell block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_the_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    demo, tests = quick_start_commands()
    assert demo.endswith("tarry demo")
    assert "pip install -e ." in demo
    assert tests.endswith("&& pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"run bash -c {shlex.quote(tests)}" in ci, "the README's test command and .ci/run's differ"
