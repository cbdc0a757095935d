"""The examples of docs/mcp.md run: the server the page shows is saved as booking.py, and the chat runs beside it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mcp_helpers import ROOT


def test_the_example_runs_against_the_server_the_page_shows(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "mcp.md").read_text()
    server, example, *_ = re.findall(r"```python\n(.*?)```", page, re.S)  # then the OAuth example (test_oauth.py)
    assert server.startswith("# booking.py")
    (tmp_path / "booking.py").write_text(server)
    done = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Booked."
