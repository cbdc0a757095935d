"""The one clock tarry reads for time limits, leases and schedules; tests move it forward.

Every module asks [`utcnow`][tarry.clock.utcnow] for the time, so a test can make a question lapse or a
lease run out at once with [`advance`][tarry.testing.advance_clock] instead of sleeping in real time. The offset
belongs to this process: other processes keep the real time. On PostgreSQL the store judges
leases by the server's clock instead (``tarry.store.moment``), moved by this same offset.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

_lock = threading.Lock()
_offset = timedelta()


def utcnow() -> datetime:
    """The current time, aware, in UTC, plus however far
    [`advance_clock`][tarry.testing.advance_clock] moved this process's clock (in tests)."""
    return datetime.now(UTC) + _offset


def moved() -> timedelta:
    """How far [`advance`][tarry.testing.advance_clock] moved this process's clock (zero outside tests)."""
    return _offset


def advance(seconds: float) -> None:
    """Move this process's clock forward by ``seconds``: time limits and leases run out as if that time passed.

    For tests. Sleeping tasks (a lease's renewal, a worker's wait) still wake on real time.
    """
    global _offset
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"The clock only moves forward by a number of seconds, got {seconds!r}")
    with _lock:
        _offset += timedelta(seconds=seconds)


def reset() -> None:
    """Put this process's clock back to the real time."""
    global _offset
    with _lock:
        _offset = timedelta()
