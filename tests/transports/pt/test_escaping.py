"""Tor's backslash escaping of PT text: escape, split, partition and unescape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transports.pt.escaping import (
    SERVER_OPTIONS,
    SMETHOD_ARGS,
    SOCKS_ARGS,
    EscapeError,
    escape,
    partition_escaped,
    split_escaped,
    unescape,
)

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_SPECIALS = st.sampled_from([SOCKS_ARGS, SERVER_OPTIONS, SMETHOD_ARGS])


def test_escape_puts_a_backslash_before_the_specials_and_the_backslash():
    assert escape(r"a=b;c\d:e,f", SOCKS_ARGS) == r"a\=b\;c\\d:e,f"
    assert escape(r"a=b;c\d:e,f", SERVER_OPTIONS) == r"a=b\;c\\d\:e,f"
    assert escape(r"a=b;c\d:e,f", SMETHOD_ARGS) == r"a\=b;c\\d:e\,f"


def test_split_keeps_escapes_and_empty_pieces():
    assert split_escaped(r"a\;b;;c\\;d", ";") == [r"a\;b", "", "c\\\\", "d"]
    assert split_escaped("", ";") == [""]
    assert split_escaped(";", ";") == ["", ""]


def test_partition_stops_at_the_first_unescaped_separator():
    assert partition_escaped(r"k\=ey=v=w", "=") == (r"k\=ey", "=", "v=w")
    assert partition_escaped(r"no\=sep", "=") == (r"no\=sep", "", "")


def test_unescape_keeps_the_escaped_character():
    assert unescape(r"a\;b\\c\=d\x") == "a;b\\c=dx"


@pytest.mark.parametrize("call", [
    lambda: split_escaped("a;b\\", ";"),
    lambda: partition_escaped("k=v\\", "="),  # past the separator too
    lambda: unescape("abc\\"),
])
def test_a_dangling_backslash_is_an_error(call):
    with pytest.raises(EscapeError, match="dangling backslash"):
        call()
    assert issubclass(EscapeError, ValueError)


def test_an_escaped_backslash_is_not_dangling():
    assert split_escaped("a\\\\", ";") == ["a\\\\"]
    assert unescape("a\\\\") == "a\\"


@pytest.mark.parametrize("sep", ["", "\\", ";;"])
def test_a_separator_is_one_character_other_than_a_backslash(sep):
    with pytest.raises(ValueError, match="separator"):
        split_escaped("a", sep)


@given(_TEXT, _SPECIALS)
def test_unescape_inverts_escape(text, specials):
    assert unescape(escape(text, specials)) == text


@given(st.lists(_TEXT, min_size=1, max_size=5), _SPECIALS)
def test_split_of_joined_escaped_pieces_round_trips(pieces, specials):
    for sep in specials:
        joined = sep.join(escape(p, specials) for p in pieces)
        assert [unescape(p) for p in split_escaped(joined, sep)] == pieces


@given(_TEXT, _TEXT, _SPECIALS)
def test_partition_of_an_escaped_pair_round_trips(key, value, specials):
    sep = specials[0]
    head, found, tail = partition_escaped(escape(key, specials) + sep + escape(value, specials),
                                          sep)
    assert (unescape(head), found, unescape(tail)) == (key, sep, value)


@given(_TEXT, _SPECIALS)
def test_escaped_text_splits_into_one_piece(text, specials):
    escaped = escape(text, specials)
    for sep in specials:
        assert split_escaped(escaped, sep) == [escaped]
