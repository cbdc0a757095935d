"""Signed links: what they say, and what refuses them (a change, a foreign secret, the time)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tarry import Principal
from tarry.clock import utcnow
from tarry.mail import LinkRefused, LinkSigner
from tarry.testing import advance_clock

SECRET = "a-link-secret-for-the-mail-tests"
ADA = Principal("u-ada", "Ada Lovelace")


def test_a_link_says_its_question_person_action_and_expiry() -> None:
    signer = LinkSigner(SECRET, ttl=60)
    link = signer.read(signer.sign("q-1", ADA, "decline"))
    assert (link.question_id, link.principal.id, link.principal.name, link.action) == (
        "q-1",
        "u-ada",
        "Ada Lovelace",
        "decline",
    )
    assert timedelta(seconds=58) < link.expires_at - utcnow() <= timedelta(seconds=60)


def test_a_changed_or_foreign_link_is_refused_as_tampered() -> None:
    signer = LinkSigner(SECRET)
    token = signer.sign("q-1", ADA, "approve")
    payload, _, signature = token.rpartition(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]  # [-1] ends in padding bits
    swapped = signer.sign("q-1", ADA, "decline").rpartition(".")[0] + "." + signature  # decline's payload
    for bad in (
        f"{payload}.{flipped}",
        swapped,
        token[:-3],
        "not-a-token",
        LinkSigner("another-secret-16chars").sign("q-1", ADA, "approve"),
    ):
        with pytest.raises(LinkRefused) as refused:
            signer.read(bad)
        assert refused.value.reason == "tampered"
        assert refused.value.link is None


def test_a_link_past_its_expiry_is_refused_as_expired() -> None:
    signer = LinkSigner(SECRET, ttl=60)
    token = signer.sign("q-1", ADA, "approve")
    advance_clock(61)
    with pytest.raises(LinkRefused, match="expired") as refused:
        signer.read(token)
    assert refused.value.reason == "expired"
    assert refused.value.link is not None and refused.value.link.question_id == "q-1"


def test_a_form_token_is_bound_to_its_link_and_cookie() -> None:
    signer = LinkSigner(SECRET)
    one, other = signer.sign("q-1", ADA, "approve"), signer.sign("q-2", ADA, "approve")
    form = signer.form_token(one, "nonce-1")
    assert signer.form_valid(one, "nonce-1", form)
    assert not signer.form_valid(other, "nonce-1", form)
    assert not signer.form_valid(one, "nonce-2", form)
    assert not signer.form_valid(one, None, form)
    assert not signer.form_valid(one, "nonce-1", form[:-2])


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        LinkSigner("short")
    with pytest.raises(ValueError, match="positive number of seconds"):
        LinkSigner(SECRET, ttl=0)
    signer = LinkSigner(SECRET)
    with pytest.raises(ValueError, match="must be one of approve, decline, answer; got 'respond'"):
        signer.sign("q-1", ADA, "respond")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs the Principal"):
        signer.sign("q-1", "u-ada", "approve")  # type: ignore[arg-type]
