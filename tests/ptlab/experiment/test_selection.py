"""-t, -c, -k and --shard: which cells a run runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptlab.common.specfile import SpecError
from ptlab.experiment.selection import Keyword, KeywordError, Selection, parse_shard, shard_of

ROWS = ["direct", "obfs4", "obfs4proxy", "meek"]
COLUMNS = ["none", "ip-blocklist", "gfw-fet", "tspu-quic"]
PROFILES = {"gfw-fet": "gfw-fet-2021", "tspu-quic": "tspu-quic-2022"}


def cells(**kw):
    return Selection(**kw).cells(ROWS, COLUMNS, PROFILES)


def test_all_by_default_in_row_order():
    assert cells() == [(t, c) for t in ROWS for c in COLUMNS]


def test_rows_and_columns():
    assert cells(transports=("meek",), censors=("none", "gfw-fet")) == [
        ("meek", "none"), ("meek", "gfw-fet")]


@pytest.mark.parametrize(("expr", "want"), [
    ("obfs4", {("obfs4", c) for c in COLUMNS} | {("obfs4proxy", c) for c in COLUMNS}),
    ("obfs4 and not proxy and fet", {("obfs4", "gfw-fet")}),
    ("meek or direct-none", {("meek", c) for c in COLUMNS} | {("direct", "none")}),
    ("2021", {(t, "gfw-fet") for t in ROWS}),  # the column's profile
    ("(meek or direct) and (quic or blocklist)",
     {("meek", "tspu-quic"), ("meek", "ip-blocklist"), ("direct", "tspu-quic"),
      ("direct", "ip-blocklist")}),
    ("MEEK and NONE", {("meek", "none")}),  # case does not matter
    ("not not meek and none", {("meek", "none")}),
])
def test_keyword_expressions_as_pytest_reads_them(expr, want):
    assert set(cells(keyword=expr)) == want


@pytest.mark.parametrize("expr", ["", "and", "meek and", "(meek", "meek)", "not", "a or or b"])
def test_a_bad_expression_is_one_clear_error(expr):
    with pytest.raises(KeywordError, match="-k"):
        Keyword(expr)


def test_an_unknown_row_or_column_is_named_with_a_suggestion():
    with pytest.raises(SpecError, match=r"-t obsf4: no transport .* \(did you mean 'obfs4'\?\)"):
        cells(transports=("obsf4",))
    with pytest.raises(SpecError, match="-c fet: no censor column"):
        cells(censors=("fet",))


@given(n=st.integers(1, 9), size=st.integers(0, 40))
def test_shards_cover_every_cell_once_in_order(n, size):
    every = [(f"t{i}", "c") for i in range(size)]
    parts = [shard_of(every, k, n) for k in range(1, n + 1)]
    assert [c for part in parts for c in part] == every
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_shard_syntax_and_range():
    assert parse_shard(" 2/8 ") == (2, 8)
    for bad in ("2", "2/0", "a/b", "1/-1"):
        with pytest.raises(SpecError, match="--shard"):
            parse_shard(bad)
    with pytest.raises(SpecError, match="K must be between 1 and N"):
        cells(shard=(9, 8))
    assert cells(shard=(1, 4)) == [("direct", c) for c in COLUMNS]
