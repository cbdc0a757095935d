"""The ``email`` notification channel: [`EmailSender`][tarry.mail.EmailSender], and the signed one-click links
([`LinkSigner`][tarry.mail.LinkSigner]) its messages carry and the inbox's ``/links`` page reads."""

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
