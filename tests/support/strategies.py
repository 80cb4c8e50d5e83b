"""Hypothesis strategies shared by fuzz tests."""

from __future__ import annotations

from typing import TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


def mostly(valid: list[T], junk: st.SearchStrategy[T], one_in: int = 4) -> st.SearchStrategy[T]:
    """One of ``valid`` most of the time, ``junk`` about once in ``one_in`` draws, so a
    fuzz built of such parts still reaches the code behind a well-formed input.
    (Hypothesis favours the ends of an integer range, so the junk is picked by a
    value inside it.)"""
    return st.tuples(st.integers(0, one_in + 1), st.sampled_from(valid), junk).map(
        lambda pick: pick[2] if pick[0] == 1 else pick[1])
