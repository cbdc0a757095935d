"""Fixtures every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tarry.testing import reset_clock


@pytest.fixture(autouse=True)
def real_time() -> Iterator[None]:
    """Each test starts on the real time, whatever the one before moved tarry's clock to."""
    reset_clock()
    yield
    reset_clock()
