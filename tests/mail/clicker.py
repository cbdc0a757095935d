"""One person's browser-less click on a link, as a process of its own: open the page, wait, confirm.

``python -m tests.mail.clicker URL DIRECTORY NAME``: GETs the link's page (keeping its cookie), writes
``DIRECTORY/ready-NAME``, waits for ``DIRECTORY/go``, POSTs the page's form, and prints the status and the
page's state.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import httpx

FORM_TOKEN = re.compile(r'name="link_csrf" value="([^"]+)"')
STATE = re.compile(r'data-state="(\w+)"')


def main(url: str, directory: Path, name: str) -> None:
    with httpx.Client(timeout=60) as client:
        page = client.get(url)
        page.raise_for_status()
        [token] = FORM_TOKEN.findall(page.text)
        (directory / f"ready-{name}").write_text("")
        deadline = time.monotonic() + 60
        while not (directory / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("no go signal within 60 s")
            time.sleep(0.005)
        confirmed = client.post(url, data={"link_csrf": token})
        [state] = STATE.findall(confirmed.text)
        print(confirmed.status_code, state, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
