"""How current a stored chat object is, as its journal knows it: when a look or a claim need not ask the database."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class ChatView:
    """What one journal knows of how current its chat object is; it changes only through the methods below."""

    seen: int | None = None
    """The chat version the chat object holds in full (``None``: known to be behind, or not known)."""
    current: bool = False
    """Within a session: the chat holds everything recorded (the journal's own message was the latest write, it has
    just read the rows, or a claim found the version unchanged), so a look need not ask and claims need not check
    the chat's version."""
    stale_at: int | None = None
    """The chat version a claim found stale: the claims that follow it, until the chat looks, check it too."""
    fresh: tuple[int, float] | None = None
    """The version a load read, and until when (``time.monotonic()``) the first look outside a session may take the
    load's rows as current."""

    def may_skip_look(self, *, in_session: bool) -> bool:
        """Whether a look may answer that nothing changed without asking: the chat is current, or, outside a
        session, it is the first look right after a load. Ends the load's freshness either way."""
        fresh, self.fresh = self.fresh, None
        if self.current:
            return True
        return not in_session and fresh is not None and fresh[0] == self.seen and time.monotonic() < fresh[1]

    def took_in(self, version: int, *, in_session: bool, fresh_for: float | None = None) -> None:
        """The chat object took in everything recorded up to ``version``. ``fresh_for``: the rows came with a load,
        and the first look outside a session within that many seconds may take them."""
        self.seen, self.stale_at, self.current = version, None, in_session
        if fresh_for is not None:
            self.fresh = (version, time.monotonic() + fresh_for)

    def wrote(self, version: int) -> bool:
        """After this process's own write, which left the chat at ``version``: whether the chat object still holds
        everything (no other write came in between). If one did, the view is known to be behind: the next look
        reads the rows without asking for the version first."""
        if self.seen == version - 1:
            self.seen = version
            return True
        self.seen = None
        return False

    def unsure(self) -> None:
        """A step that may show another writer: the next look asks, and claims check the chat again."""
        self.current, self.fresh = False, None

    def behind(self) -> None:
        """The chat changed in more than this process knows: the next look reads the rows."""
        self.unsure()
        self.seen = None

    def claim_check(self) -> tuple[bool, int | None]:
        """How a claim checks the chat: ``(True, None)``, it need not (the chat is current); ``(True, version)``,
        it holds only while the chat is at ``version``; ``(False, None)``, it is stale at once (the view is known
        to be behind, so the chat looks first)."""
        if self.current:
            return True, None
        check = self.stale_at if self.stale_at is not None else self.seen
        return check is not None, check

    def claimed(self, *, stale: bool, checked: int | None) -> None:
        """A claim that checked the chat at ``checked`` (``None``: it did not) came back ``stale``, or not."""
        if stale:
            self.seen, self.stale_at, self.current = None, checked, False
        elif checked is not None:  # the chat was at that version then
            self.current, self.stale_at = True, None

    def turn_claimed(self, version: int) -> None:
        """A claim of the chat's turn found the chat at ``version``."""
        self.current = version == self.seen
