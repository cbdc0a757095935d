"""``tarry serve`` in a real process: it prints a login link, binds 127.0.0.1 and requires the token."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.web.tools import call, park, pending, setup


def test_tarry_serve_prints_a_login_link_and_requires_its_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    setup(url)
    chat = park(url, call("refund", order="S1", amount=3))
    [asked] = pending(url, chat)
    process = subprocess.Popen(
        [sys.executable, "-m", "tarry.cli", "serve", "--url", url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        link = ""
        deadline = time.monotonic() + 60
        while not link:
            assert time.monotonic() < deadline, "tarry serve printed no login link"
            line = process.stdout.readline()
            assert line, f"tarry serve ended early (status {process.poll()})"
            if "/login?token=" in line:
                link = line.split()[-1]
        assert link.startswith("http://127.0.0.1:")
        base = link.split("/login")[0]
        token = link.split("token=")[1]
        assert len(token) >= 24

        with httpx.Client(base_url=base, follow_redirects=True) as client:
            assert client.get("/").status_code == 401
            assert client.get("/api/questions").status_code == 401
            assert client.get("/login?token=nope").status_code == 401
            logged_in = client.get(link)  # follows the redirect to the inbox with the session cookie
            assert logged_in.status_code == 200
            assert asked.id in logged_in.text
        listed = httpx.get(f"{base}/api/questions", headers={"Authorization": f"Bearer {token}"})
        assert [item["id"] for item in listed.json()] == [asked.id]
    finally:
        process.terminate()
        process.wait(timeout=30)


def started(arguments: list[str]) -> tuple[subprocess.Popen[str], str]:
    """``tarry serve`` with ``arguments``, once it printed its login link; the process and the link."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tarry.cli", "serve", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "tarry serve printed no login link"
        line = process.stdout.readline()
        assert line, f"tarry serve ended early (status {process.poll()})"
        if "/login?token=" in line:
            return process, line.split()[-1]


def test_a_request_naming_another_host_is_refused(tmp_path: Path) -> None:
    """DNS rebinding: a page of another site whose name now points at this machine sends that name as Host."""
    url = f"sqlite:///{tmp_path / 'served.db'}"
    setup(url)
    process, link = started(["--url", url, "--port", "0", "--allowed-host", "Inbox.Example.org"])
    try:
        base = link.split("/login")[0]
        port = base.rsplit(":", 1)[1]
        token = link.split("token=")[1]
        bearer = {"Authorization": f"Bearer {token}"}
        for host, status in [
            (f"127.0.0.1:{port}", 200),
            (f"localhost:{port}", 200),
            ("inbox.example.org", 200),
            (f"rebound.example.net:{port}", 400),
            ("127.0.0.1.rebound.example.net", 400),
        ]:
            answer = httpx.get(f"{base}/api/questions", headers={**bearer, "Host": host})
            assert answer.status_code == status, host
    finally:
        process.terminate()
        process.wait(timeout=30)
