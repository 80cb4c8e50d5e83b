"""'Did you mean' for names a person types: spec keys, transports, profiles.

A typo that only says "unknown key" sends the user to the docs; naming the
closest known word usually ends the search there. Standard library only, so the
spec loader, the CLI and the censor's profile loader can all use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest choice, or ``""`` if none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
