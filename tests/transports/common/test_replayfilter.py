"""The replay filter: memory within the TTL, expiry, a bounded size, and clock jumps."""

from hypothesis import given
from hypothesis import strategies as st

from transports.common.replayfilter import DEFAULT_TTL, MAX_ENTRIES, ReplayFilter


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_defaults_match_obfs4proxy():
    assert DEFAULT_TTL == 3 * 3600
    assert MAX_ENTRIES == 102400


@given(st.lists(st.binary(max_size=64), unique=True, max_size=50))
def test_first_sight_is_new_second_is_a_replay(items):
    f = ReplayFilter(clock=FakeClock())
    assert [f.test_and_set(i) for i in items] == [False] * len(items)
    assert [f.test_and_set(i) for i in items] == [True] * len(items)


def test_entries_expire_after_ttl():
    clock = FakeClock()
    f = ReplayFilter(ttl=60, clock=clock)
    assert not f.test_and_set(b"mac")
    clock.now += 59
    assert f.test_and_set(b"mac")
    clock.now += 1  # 60 s after first sight: forgotten
    assert not f.test_and_set(b"mac")
    assert len(f) == 1


def test_explicit_now_overrides_clock():
    f = ReplayFilter(ttl=10, clock=lambda: 0.0)
    assert not f.test_and_set(b"x", now=100.0)
    assert f.test_and_set(b"x", now=105.0)
    assert not f.test_and_set(b"x", now=111.0)


def test_clock_going_backwards_clears_the_filter():
    clock = FakeClock()
    f = ReplayFilter(clock=clock)
    f.test_and_set(b"a")
    clock.now -= 1
    assert not f.test_and_set(b"a")
    assert len(f) == 1


def test_size_is_bounded_and_the_eldest_go_first():
    f = ReplayFilter(clock=FakeClock(), max_entries=10)
    for i in range(25):
        f.test_and_set(b"%d" % i)
        assert len(f) <= 10
    assert f.test_and_set(b"24")  # recent entries are kept
    assert not f.test_and_set(b"0")  # the eldest were evicted


def test_compaction_keeps_memory_flat_over_time():
    clock = FakeClock()
    f = ReplayFilter(ttl=5, clock=clock)
    for i in range(1000):
        clock.now += 1
        f.test_and_set(b"%d" % i)
    assert len(f) <= 5


def test_separate_filters_use_separate_keys():
    assert ReplayFilter()._key != ReplayFilter()._key
