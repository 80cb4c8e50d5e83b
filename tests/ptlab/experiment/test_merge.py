"""ptlab merge: shards of one run joined as one; anything else refused in one line."""

from __future__ import annotations

import pytest

from ptlab.common.results import load_results, write_results
from ptlab.common.specfile import SpecError
from ptlab.experiment.merge import merge, merge_into
from tests.support.rows import blocked_row, reachable_row, results_of

SPEC = {"transports": {"obfs4": {}, "meek": {}}, "censors": {"none": {}, "gfw": {}}}


def shard(tmp_path, name, rows, **changes):
    res = results_of(rows, spec=changes.pop("spec", SPEC),
                     settings=changes.pop("settings", {"experiment.repetitions": 3}),
                     provenance={"git_sha": changes.pop("sha", "abc"), "hostname": name},
                     selection={"shard": name}, **changes)
    write_results(res, tmp_path / name)
    return tmp_path / name


def test_shards_join_in_the_specs_order(tmp_path):
    a = shard(tmp_path, "1of2", [reachable_row(transport="meek"), blocked_row()])
    b = shard(tmp_path, "2of2", [reachable_row()], started="2023-12-31T00:00:00+00:00")
    out = merge_into([a, b], tmp_path / "all")
    assert [(r.transport, r.censor) for r in out.rows] == [
        ("obfs4", "none"), ("obfs4", "gfw"), ("meek", "none")]
    assert out.started == "2023-12-31T00:00:00+00:00"
    assert [m["hostname"] for m in out.provenance["merged"]] == ["1of2", "2of2"]
    assert len(load_results(tmp_path / "all").rows) == 3


@pytest.mark.parametrize(("change", "words"), [
    ({"spec": {"transports": {"obfs4": {}}, "censors": {"none": {}}}}, "other a spec"),
    ({"settings": {"experiment.repetitions": 1}}, "other settings"),
    ({"sha": "def"}, "other code"),
])
def test_other_runs_are_refused_unless_forced(tmp_path, change, words):
    a = shard(tmp_path, "a", [reachable_row()])
    b = shard(tmp_path, "b", [blocked_row()], **change)
    with pytest.raises(SpecError, match=f"not shards of one run: .*{words}"):
        merge([a, b])
    assert len(merge([a, b], force=True).rows) == 2


def test_a_cell_in_two_shards_is_refused(tmp_path):
    a = shard(tmp_path, "a", [reachable_row()])
    b = shard(tmp_path, "b", [reachable_row()])
    with pytest.raises(SpecError, match="obfs4 × none is in both .* counted twice"):
        merge([a, b])


def test_missing_results_and_a_single_shard(tmp_path):
    with pytest.raises(SpecError, match="at least two"):
        merge([tmp_path])
    with pytest.raises(SpecError, match="no results.json"):
        merge([tmp_path / "x", tmp_path / "y"])
