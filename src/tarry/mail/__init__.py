"""The ``email`` notification channel (``pip install 'tarry[notify]'``): [`EmailSender`][tarry.mail.EmailSender],
and the signed one-click links ([`LinkSigner`][tarry.mail.LinkSigner]) its messages carry and the inbox's
``/links`` page reads."""

try:
    import aiosmtplib  # noqa: F401
    import itsdangerous  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"tarry.mail needs the notify extra: pip install 'tarry[notify]' (missing: {error.name})"
    ) from error

from tarry.mail.compose import DELIVERY_HEADER, decision_text
from tarry.mail.links import DEFAULT_TTL, LINK_ACTIONS, Link, LinkAction, LinkRefused, LinkSigner
from tarry.mail.sender import EmailSender

__all__ = [
    "DEFAULT_TTL",
    "DELIVERY_HEADER",
    "LINK_ACTIONS",
    "EmailSender",
    "Link",
    "LinkAction",
    "LinkRefused",
    "LinkSigner",
    "decision_text",
]
