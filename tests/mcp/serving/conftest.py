"""Fixtures for the MCP server tests: tarry's MCP server in real OS processes on one database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from mcp_helpers import ROOT, free_port, wait_for_port

TOOLS = "tests.mcp.serving.served_tools:TOOLS"
KEY = "a-shared-request-state-key-for-tests"


class ServerProcess:
    """One ``tarry mcp serve`` process; ``kill()`` ends it at once (SIGKILL), as a crash would."""

    def __init__(
        self, database: str, markers: Path, lease: float, options: Sequence[str] = (), approvals: str = "client"
    ) -> None:
        self.port = free_port()
        # A file, not a pipe: a pipe nobody reads fills up and blocks the server.
        self.log = open(markers.with_name(f"server-{self.port}.log"), "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "TARRY_TEST_MARKERS": str(markers), "TARRY_MCP_STATE_KEY": KEY}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        argv = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--tools", TOOLS, "--url", database]
        argv += ["--port", str(self.port), "--lease", str(lease), "--approvals", approvals, *options]
        self.process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_for_port(self.port, self.process)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    """The file the served tools append a line to each time they run."""
    return tmp_path / "markers"


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The database the server processes share (set up by the first one): a SQLite file, or with
    ``parametrize("database", ["postgresql"], indirect=True)`` a PostgreSQL schema of its own."""
    if getattr(request, "param", "sqlite") == "postgresql":
        from tests.store.conftest import _postgres_schema_url

        yield from _postgres_schema_url()
    else:
        yield f"sqlite:///{tmp_path / 'served.db'}"


@pytest.fixture
def start_server(database: str, markers: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Starts ``tarry mcp serve`` processes on the test's database; all are stopped at the end."""
    started: list[ServerProcess] = []

    def start(lease: float = 60.0, options: Sequence[str] = (), approvals: str = "client") -> ServerProcess:
        server = ServerProcess(database, markers, lease, options, approvals)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def start_worker(database: str) -> Iterator[Callable[[], Callable[[], None]]]:
    """Starts ``tarry worker`` for the served calls on the test's database; returns what stops it."""
    started: list[subprocess.Popen[bytes]] = []

    def stop(worker: subprocess.Popen[bytes]) -> None:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(10)

    def start() -> Callable[[], None]:
        agents = "tests.mcp.serving.served_tools:worker_agents"
        argv = [sys.executable, "-m", "tarry.cli", "worker", "--agents", agents, "--url", database, "--lease", "1"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        started.append(worker)
        return lambda: stop(worker)

    yield start
    for worker in started:
        stop(worker)
