"""The examples of docs/mcp.md run."""

from __future__ import annotations

import re
import subprocess
import sys

from mcp_helpers import ROOT, SERVERS


def test_the_example_runs() -> None:
    page = (ROOT / "docs" / "mcp.md").read_text()
    code = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    program = f"SERVER = {str(SERVERS / 'booking.py')!r}\n" + code
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Booked."
