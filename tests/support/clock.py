"""A clock a test moves by hand, for code that takes an injectable clock."""

from __future__ import annotations


class ManualClock:
    """``clock()`` is ``clock.t``; a test sets or advances ``t`` itself."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
