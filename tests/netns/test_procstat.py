"""netns.procstat reads a process's stat line right even when its name is built to
mislead a naive split, and tells a live process from a zombie and from none."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from netns import procstat

# A command name with the characters that break splitting on spaces or on the first
# ")": the kernel keeps 15 bytes of it.
TRICKY = "a) b (c) d"
SPIN_THEN_SLEEP = (f"open('/proc/self/comm', 'w').write({TRICKY!r})\n"
                   "import time\nt = time.process_time()\n"
                   "while time.process_time() - t < 0.2: pass\n"
                   "print('ready', flush=True)\ntime.sleep(60)\n")


def test_a_misleading_name_still_gives_the_right_fields():
    line = f"4242 ({TRICKY}) S 1 4242 4242 0 -1 4194560 " + " ".join(["7"] * 45)
    f = procstat.split(line)
    assert f[procstat.STATE] == "S" and f[procstat.PPID] == "1"
    assert f[procstat.PGRP] == "4242"


def test_a_name_that_is_not_utf8_is_read_all_the_same():
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              "open('/proc/self/comm', 'wb').write(b'\\xff\\xfe) x')\n"
                              "print('ready', flush=True)\ntime.sleep(60)\n"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        with open(f"/proc/{child.pid}/comm", "rb") as comm:
            assert comm.read().startswith(b"\xff\xfe) x")
        fields = procstat.fields(child.pid)
        assert fields is not None and fields[procstat.PPID] == str(os.getpid())
        assert procstat.alive(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_live_process_then_a_zombie_then_none():
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        with open(f"/proc/{child.pid}/comm") as comm:
            assert comm.read().strip() == TRICKY
        fields = procstat.fields(child.pid)
        assert fields is not None and fields[procstat.PPID] == str(os.getpid())
        assert procstat.alive(child.pid)
        start = procstat.start_time(child.pid)
        assert start is not None and start > 0
        cpu = procstat.cpu_seconds(child.pid)
        assert cpu is not None and cpu >= 0.15  # it spun for 0.2 s of CPU
        child.kill()
        deadline = time.monotonic() + 10
        while procstat.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Killed and not yet reaped: a zombie, there but not alive.
        fields = procstat.fields(child.pid)
        assert fields is not None and fields[procstat.STATE] == "Z"
        assert not procstat.alive(child.pid)
        assert procstat.start_time(child.pid) == start  # the same process still
    finally:
        child.kill()
        child.wait()
    assert procstat.fields(child.pid) is None
    assert procstat.start_time(child.pid) is None and procstat.cpu_seconds(child.pid) is None
    assert not procstat.alive(child.pid)


def children_seconds() -> float:
    own = procstat.cpu_seconds(os.getpid())
    with_reaped = procstat.cpu_seconds(os.getpid(), reaped=True)
    assert own is not None and with_reaped is not None
    return with_reaped - own


def test_reaped_children_count_only_when_asked():
    before = children_seconds()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass\n"], check=True)
    # The child's 0.3 s (and its start-up) are its parent's once it is reaped.
    assert children_seconds() - before >= 0.25
