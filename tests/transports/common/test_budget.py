"""The descriptor budget, the caps derived from it, and quiet resource errors."""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys

import pytest

from transports.common.budget import (
    MAX_UNAUTHENTICATED,
    RESERVE,
    QuietErrors,
    describe_error,
    is_resource_error,
    unauthenticated_cap,
)
from transports.common.silence import ServerPolicy


@pytest.mark.parametrize(("budget", "cap"), [
    (1024, (1024 - RESERVE) // 3),  # 320: a flood leaves two thirds for sessions
    (256, 64),
    (100, 16),  # the floor
    (RESERVE + 3 * MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED),  # where the ceiling starts
    (RESERVE + 3 * MAX_UNAUTHENTICATED - 3, MAX_UNAUTHENTICATED - 1),
    (1 << 20, MAX_UNAUTHENTICATED),
])
def test_the_unauthenticated_cap_is_a_third_of_the_budget_after_the_reserve(budget, cap):
    assert unauthenticated_cap(budget) == cap
    # Flooded to the cap, the pool and the reserve still leave room for sessions.
    assert budget - RESERVE - cap >= 2 * cap or cap == 16


def test_a_policy_takes_its_cap_from_the_budget_it_is_made_under():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256));"
            "from transports.common.silence import ServerPolicy;"
            "print(ServerPolicy().max_unauthenticated)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == 64
    assert ServerPolicy(max_unauthenticated=5).max_unauthenticated == 5


def test_the_soft_limit_is_raised_to_the_hard_one():
    code = ("import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (100, 2000));"
            "from transports.common.budget import raise_nofile_limit;"
            "print(raise_nofile_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "2000" and "(2000, 2000)" in out.stdout


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_resource_errors_are_one_line_a_second_with_a_count_of_the_rest():
    lines: list[str] = []
    clock = Clock()
    quiet = QuietErrors(lines.append, interval_s=1.0, clock=clock)
    loop = asyncio.new_event_loop()
    try:
        emfile = OSError(errno.EMFILE, "Too many open files")
        for _ in range(500):
            quiet(loop, {"message": "socket.accept() out of system resource",
                         "exception": emfile})
        assert lines == ["socket.accept() out of system resource: EMFILE"]
        clock.t += 0.999  # still inside the interval
        quiet(loop, {"message": "socket.accept() out of system resource", "exception": emfile})
        assert len(lines) == 1
        clock.t += 0.001  # at the interval: logged, with what was left out
        quiet(loop, {"message": "socket.accept() out of system resource", "exception": emfile})
        assert lines[-1] == ("socket.accept() out of system resource: EMFILE "
                             "(500 more like it suppressed)")
        # Each kind has its own interval.
        quiet(loop, {"message": "send failed", "exception": ConnectionResetError(
            errno.ECONNRESET, "reset")})
        assert lines[-1] == "send failed: ECONNRESET" and len(lines) == 3
    finally:
        loop.close()


def test_other_errors_still_reach_the_default_handler(caplog):
    lines: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        QuietErrors(lines.append)(loop, {"message": "a bug", "exception": ValueError("x")})
    finally:
        loop.close()
    assert not lines and "a bug" in caplog.text


def test_what_counts_as_a_resource_error():
    assert is_resource_error(OSError(errno.ENFILE, "x"))
    assert not is_resource_error(OSError(errno.ECONNRESET, "x"))
    assert not is_resource_error(ValueError())
    assert not is_resource_error(None)


def test_what_an_interval_left_out_is_written_a_second_later_not_lost():
    lines: list[str] = []
    clock = Clock()
    quiet = QuietErrors(lines.append, interval_s=1.0, clock=clock)
    quiet.report("handshake", "handshake failed: EOF")
    for i in range(41):
        quiet.report("handshake", f"handshake failed: try {i}")
    assert lines == ["handshake failed: EOF"] and quiet.counts["handshake"] == 42
    clock.t += 0.5
    quiet.flush()  # inside the interval: nothing yet
    assert len(lines) == 1
    clock.t += 0.5
    quiet.flush()  # the newest message, with the others counted
    assert lines[-1] == "handshake failed: try 40 (40 more like it suppressed)"
    clock.t += 5
    quiet.flush()  # nothing left: no line
    assert len(lines) == 2
    quiet.report("handshake", "alone")
    quiet.report("handshake", "left out")
    quiet.flush(final=True)  # the process ends: written now, whatever the interval
    assert lines[-2:] == ["alone", "left out"]


def test_an_error_is_described_without_the_address_asyncio_puts_in_it():
    exc = OSError(errno.ECONNREFUSED, "Connect call failed ('198.18.0.7', 9001)")
    assert describe_error(exc) == "ConnectionRefusedError: Connection refused"
    assert describe_error(ValueError("bad frame")) == "ValueError: bad frame"
    assert describe_error(TimeoutError()) == "TimeoutError"
