"""Leases are judged by the database's clock: processes whose clocks differ still run a call once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tarry.store import Store

ROOT = Path(__file__).resolve().parents[2]


def start(role: str, url: str, folder: Path, skew: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.skewed", role, url, str(folder), str(skew)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(("first", "second"), [(-5.5, 0.0), (0.0, 5.5)], ids=["holder-behind", "racer-ahead"])
async def test_two_processes_whose_clocks_differ_run_an_idempotent_call_once(
    postgres_url: str, tmp_path: Path, first: float, second: float
) -> None:
    """The first process runs the charge; the second, its clock 5.5 s from the first's, tries to take it over."""
    async with Store(postgres_url) as store:
        await store.setup()
    processes = [start("first", postgres_url, tmp_path, first), start("second", postgres_url, tmp_path, second)]
    for process in processes:
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
    # Before: the other process judged the first one's lease run out while the charge ran, and charged again.
    assert (tmp_path / "runs").read_text().splitlines() == ["30"]
    async with Store(postgres_url) as store:
        (chat_id,) = [(tmp_path / "chat").read_text()]
        messages = await store.messages(chat_id)
    assert [message.content for message in messages] == ["Charge 30 EUR", "", "Charged 30 EUR.", "Charged."]
