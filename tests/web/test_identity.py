"""Who decides through ``tarry serve``: per-user tokens, an identity header trusted only from the proxy, the policy.

A real ``tarry serve`` process and HTTP; the two-person rule of finance (tests.store.approvers).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tarry.cli import main
from tarry.web.identity import hash_token
from tests.web.client import AUTH, Inbox, problem
from tests.web.test_accountable_web import park_payout
from tests.web.tools import pending, setup

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {"ann": "ann-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef", "mallory": "mallory-token-0123"}
NAMES = {"ann": "Ann Archer", "bob": "Bob Baker", "mallory": "Mallory Moe"}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``tarry serve`` with a users file, the identity header trusted from 127.0.0.1 and finance's check: the
    database URL and the server's base URL."""
    url = f"sqlite:///{tmp_path / 'served.db'}"
    setup(url)
    users = tmp_path / "users.txt"
    lines = [f"{who} {hash_token(token)} {NAMES[who]}" for who, token in TOKENS.items()]
    users.write_text("# id, sha256 of the token, name\n" + "\n".join(lines) + "\n")
    options = ["--users", str(users), "--trust-identity-header", "X-Remote-User", "--trusted-proxy", "127.0.0.1"]
    options += ["--may-decide", "tests.store.approvers:may_decide"]
    process = subprocess.Popen(
        [sys.executable, "-m", "tarry.cli", "serve", "--url", url, "--port", "0", *options],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        printed: list[str] = []
        deadline = time.monotonic() + 60
        while not any("log in with their own token" in line for line in printed):
            assert time.monotonic() < deadline, f"tarry serve did not start: {printed}"
            line = process.stdout.readline()
            assert line, f"tarry serve ended early (status {process.poll()}): {printed}"
            printed.append(line)
        assert not any("/login?token=" in line and "<token>" not in line for line in printed)  # no shared link
        [base] = re.findall(r"(http://127\.0\.0\.1:\d+)/login\?token=<token>", "".join(printed))
        yield url, base
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_two_people_with_their_own_tokens_complete_a_two_person_rule_and_a_spoofed_header_is_ignored(
    served: tuple[str, str],
) -> None:
    url, base = served
    chat = park_payout(url)
    [approval] = pending(url, chat)
    path = f"/api/questions/{approval.id}/approve"
    # Another loopback address than the trusted proxy's: its identity header is anybody's claim.
    elsewhere = httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    proxy = httpx.Client(base_url=base)  # from 127.0.0.1, the trusted proxy
    with elsewhere, proxy:
        assert elsewhere.post(path, headers={"X-Remote-User": "ann"}).status_code == 401
        spoofed = problem(elsewhere.post(path, headers={"X-Remote-User": "ann", **bearer("mallory")}), 403)
        assert spoofed["detail"] == "Mallory Moe may not decide the payout call (it needs 'finance')"
        assert elsewhere.get("/api/questions", headers={"Authorization": "Bearer guessed"}).status_code == 401

        counted = elsewhere.post(path, headers=bearer("ann"))
        assert counted.status_code == 200, counted.text
        assert counted.json()["question"]["decision"] is None
        assert [vote["by"] for vote in counted.json()["question"]["votes"]] == [{"id": "ann", "name": "Ann Archer"}]
        as_json = {"content-type": "application/json"}
        # The proxy says ann, and forwards the browser's address: the proxy's own address is what is trusted.
        forwarded = {"X-Remote-User": "ann", "X-Forwarded-For": "203.0.113.9", **as_json}
        again = problem(proxy.post(path, headers=forwarded), 403)
        claimed = {"X-Remote-User": "ann", "X-Forwarded-For": "127.0.0.1"}  # written by a client, not the proxy
        assert elsewhere.post(path, headers=claimed).status_code == 401
        assert again["detail"] == "ann already approved the payout call; it needs 2 different people"

        decided = elsewhere.post(path, headers=bearer("bob"))
        assert decided.status_code == 200, decided.text
        assert decided.json()["question"]["decision"] == "accept"
        assert decided.json()["question"]["decided_by"] == {"id": "bob", "name": "Bob Baker"}
        history = elsewhere.get("/api/history", params={"question_id": approval.id}, headers=bearer("bob")).json()
        assert [(event["outcome"], event["by"]["id"]) for event in history] == [
            ("refused", "mallory"),
            ("counted", "ann"),
            ("refused", "ann"),
            ("decided", "bob"),
        ]


def test_the_inbox_shows_the_policy_and_the_votes_and_offers_buttons_only_to_who_may_decide(
    served: tuple[str, str],
) -> None:
    url, base = served
    chat = park_payout(url)
    [approval] = pending(url, chat)
    card = re.compile(rf'<li class="card card-approval" id="q-{approval.id}".*?</li>', re.DOTALL)
    approve_form = f'action="/questions/{approval.id}/approve"'
    decline_form = f'action="/questions/{approval.id}/decline"'

    def page_of(who: str) -> str:
        with httpx.Client(base_url=base, follow_redirects=True) as browser:
            assert browser.get(f"/login?token={TOKENS[who]}").status_code == 200  # a session cookie naming them
            [shown] = card.findall(browser.get("/").text)
            return str(shown)

    ann = page_of("ann")
    assert "Needs 2 different people&#39;s approval, each allowed as &#39;finance&#39;; 0 of 2 so far." in ann
    assert approve_form in ann and decline_form in ann
    mallory = page_of("mallory")
    assert "You may not approve this: Mallory Moe may not decide the payout call" in mallory
    assert approve_form not in mallory and decline_form not in mallory

    assert httpx.post(f"{base}/api/questions/{approval.id}/approve", headers=bearer("ann")).status_code == 200
    ann = page_of("ann")
    assert "1 of 2 so far: Ann Archer." in ann
    assert "You may not approve this: Ann Archer already approved the payout call" in ann
    assert approve_form not in ann and decline_form in ann  # one allowed decline still ends the call
    bob = page_of("bob")
    assert "1 of 2 so far: Ann Archer." in bob and approve_form in bob


def test_the_shared_login_token_never_counts_toward_a_two_person_rule(inbox: Inbox) -> None:
    inbox.store.may_decide = lambda principal, question: True
    chat = park_payout(inbox.url)
    [approval] = pending(inbox.url, chat)
    refused = problem(inbox.client.post(f"/api/questions/{approval.id}/approve", headers=AUTH), 403)
    assert refused["detail"] == (
        "Inbox token holder is a self-declared name that nobody checked, and the payout call needs a verified "
        "identity: its policy names who may"
    )
    page = inbox.client.get("/", headers=AUTH).text
    assert "You may not approve this: Inbox token holder is a self-declared name" in page
    assert f'action="/questions/{approval.id}/approve"' not in page


def test_tarry_serve_refuses_identity_options_that_do_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    users = tmp_path / "users.txt"
    users.write_text(f"ann {hash_token('a')} Ann\nbob not-a-hash Bob\n")
    url = f"sqlite:///{tmp_path / 'never.db'}"
    assert main(["serve", "--url", url, "--users", str(users)]) == 2
    assert f"{users}, line 2: expected 'ID SHA256_OF_TOKEN [NAME]', got 'bob not-a-hash Bob'" in capsys.readouterr().err
    assert main(["serve", "--url", url, "--trusted-proxy", "127.0.0.1"]) == 2
    assert "--trusted-proxy goes with --trust-identity-header NAME" in capsys.readouterr().err
    assert main(["serve", "--url", url, "--trust-identity-header", "X-Remote-User"]) == 2
    assert "needs the proxy's addresses: anybody can send that header" in capsys.readouterr().err
    assert main(["serve", "--url", url, "--may-decide", "tests.cli.policies:awaited"]) == 2
    assert "not a coroutine function" in capsys.readouterr().err
    assert not (tmp_path / "never.db").exists()
