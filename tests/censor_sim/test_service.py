"""The censor service's own plumbing, without a network."""

from __future__ import annotations

import io
import os
import sys

import pytest

import censor_sim.service as service
from censor_sim.profile import load_profile


def test_detection_lines_wait_for_the_batch_flush_even_under_pythonunbuffered(monkeypatch):
    """PYTHONUNBUFFERED (the lab's process runner sets it) makes stdout write through,
    a write(2) per detection line; the censor buffers it and flushes per batch."""
    r, w = os.pipe()
    try:
        unbuffered = io.TextIOWrapper(io.FileIO(w, "w", closefd=False), encoding="utf-8",
                                      write_through=True)  # what -u / PYTHONUNBUFFERED give
        monkeypatch.setattr(sys, "stdout", unbuffered)
        service._buffered_stdout()
        assert sys.stdout is not unbuffered and not sys.stdout.write_through
        service.emit("detection", flush=False, detector="fet")
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):  # nothing written yet
            os.read(r, 4096)
        sys.stdout.flush()
        assert b'"event":"detection"' in os.read(r, 4096)
        service.emit("ready")  # flush=True lines still go at once
        assert b'"event":"ready"' in os.read(r, 4096)
    finally:
        os.close(r)
        os.close(w)


def test_a_buffered_stdout_is_left_alone(monkeypatch):
    out = io.TextIOWrapper(io.BufferedWriter(io.BytesIO()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    service._buffered_stdout()
    assert sys.stdout is out


def test_a_detection_that_acts_goes_out_at_once_and_one_that_does_not_waits(monkeypatch):
    """The engine writes a detection before its actions take effect, so an acting
    detection's line must be in the log first; p = 0 detections wait for the batch."""
    class Log(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1

    out = Log()
    monkeypatch.setattr(sys, "stdout", out)
    effects = service.LiveEffects(load_profile("gfw-fet-2021"), None)
    effects.event("detection", detector="fet", actions=[])
    assert out.flushes == 0 and out.getvalue().count("\n") == 1  # written, not flushed
    effects.event("detection", detector="fet", actions=["residual"])
    assert out.flushes == 1
    effects.event("detection", detector="censor1", evidence={})  # Geneva's: it always acts
    assert out.flushes == 2
