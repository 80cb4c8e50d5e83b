"""Relay hostname patterns: which bridges a proxy agrees to relay to.

Snowflake's anti-abuse rule (``common/namematcher``; docs/transports/snowflake.md §2.6). A
pattern ends with ``$`` (by convention; the parser does not insist). A
leading ``^`` means "exactly this host"; otherwise it is a plain suffix match
with no dot boundary, so ``torproject.net$`` matches ``eviltorproject.net``,
as in Tor's code. The broker sends a proxy a relay URL only if the proxy's
pattern is a *superset* of the broker's own allowed pattern, so a proxy never
learns of a relay it would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RelayPattern:
    suffix: str
    exact: bool

    @classmethod
    def parse(cls, text: str) -> RelayPattern:
        """Tor's parser: a trailing ``$`` is dropped if present (Tor's proxies always
        send one), so ``""`` is the suffix that matches every host."""
        body = text.removesuffix("$")
        exact = body.startswith("^")
        return cls(body[1:] if exact else body, exact)

    def matches(self, host: str) -> bool:
        """Whether a relay hostname is inside this pattern."""
        return host == self.suffix if self.exact else host.endswith(self.suffix)

    def covers(self, other: RelayPattern) -> bool:
        """Whether every host ``other`` admits is admitted here too."""
        if self.exact:
            return other.exact and other.suffix == self.suffix
        return other.suffix.endswith(self.suffix)

    def __str__(self) -> str:
        return ("^" if self.exact else "") + self.suffix + "$"
