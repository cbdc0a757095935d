"""A notifier in a process of its own: ``python -m tests.notify.deliverer URL WEBHOOK_URL SECRET LEASE``.

It delivers the store's notices to the webhook until it is killed (the test SIGKILLs it mid-delivery).
"""

from __future__ import annotations

import asyncio
import sys

from tarry.jobs.notifier import Notifier
from tarry.jobs.webhook import WebhookSender
from tarry.store import Store


async def deliver(url: str, webhook: str, secret: str, lease: str) -> None:
    async with Store(url, lease=float(lease)) as store:
        notifier = Notifier(
            store, [WebhookSender(webhook, secret, timeout=30)], batch=10, concurrency=4, max_attempts=1000
        )
        await notifier.run()


if __name__ == "__main__":
    asyncio.run(deliver(*sys.argv[1:]))
