"""``EmailSender``: the ``email`` channel's sender (a ``tarry.notices.Sender``), over SMTP with ``aiosmtplib``."""

from __future__ import annotations

import aiosmtplib

from tarry.mail.compose import compose
from tarry.mail.links import LinkSigner
from tarry.notices import NOTICE_EVENTS, Delivery, NoticeEvent

__all__ = ["EmailSender"]


class EmailSender:
    """Sends each ``email`` delivery as a multipart message (plain text and HTML) through an SMTP server.

    ``host``, ``port``, ``username`` and ``password``: the SMTP server and its login (none without a
    username). ``start_tls``: upgrade the connection with STARTTLS (``None``: when the server offers it);
    ``use_tls``: connect over TLS from the start (port 465). ``sender``: the ``From`` address.
    ``base_url``: the inbox's public address, which the links point under (``https://example.com/inbox``).
    ``links``: the [`LinkSigner`][tarry.mail.LinkSigner] whose secret the inbox has too.

    A message's ``Message-ID`` and its ``X-Tarry-Delivery`` header are made from the delivery's id, the same on
    every attempt, so a receiver can drop a repeat. An SMTP error raises, which asks the worker for another try.
    """

    def __init__(
        self,
        host: str,
        port: int = 587,
        *,
        sender: str,
        base_url: str,
        links: LinkSigner,
        username: str | None = None,
        password: str | None = None,
        start_tls: bool | None = None,
        use_tls: bool = False,
        timeout: float = 30.0,
    ) -> None:
        if not host:
            raise ValueError("EmailSender needs the SMTP server's host")
        if not sender or "@" not in sender:
            raise ValueError(f"EmailSender's sender must be an email address, got {sender!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"EmailSender's base_url must be the inbox's http(s) address, got {base_url!r}")
        if not isinstance(links, LinkSigner):
            raise TypeError(f"EmailSender's links must be a LinkSigner, got {type(links).__name__}")
        self.host = host
        self.port = port
        self.sender = sender
        self.base_url = base_url
        self.links = links
        self._login = {"username": username, "password": password} if username else {}
        self._tls = {"start_tls": start_tls, "use_tls": use_tls, "timeout": timeout}

    @property
    def channel(self) -> str:
        """``"email"``."""
        return "email"

    events: tuple[NoticeEvent, ...] = tuple(event for event in NOTICE_EVENTS if event != "counted")
    """The events mailed: all but ``counted`` (a mail for each approval while more are needed would be noise; the
    decision's mail names every approver)."""

    async def send(self, delivery: Delivery) -> None:
        """Send ``delivery`` to its address; raises ``ValueError`` for a delivery of another channel or without an
        address, and ``aiosmtplib``'s errors when the server does not take it."""
        if delivery.channel != self.channel:
            raise ValueError(f"EmailSender sends email deliveries, got channel {delivery.channel!r}")
        message = compose(delivery, self.sender, self.base_url, self.links)
        await aiosmtplib.send(message, hostname=self.host, port=self.port, **self._login, **self._tls)  # type: ignore[arg-type]
