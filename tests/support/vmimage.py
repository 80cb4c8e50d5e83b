"""The cached VM image, for the tests that boot it.

Booting the three VMs under TCG and running a row on them takes minutes of both
CPUs, more than the suite's whole budget on the 2-vCPU CI machine
(docs/lab/testing.md §5). So these tests run only when the image is cached for
this checkout *and* ``PTLAB_VM_TESTS=1`` asks for them; otherwise they skip and
say which of the two is missing.
"""

from __future__ import annotations

import os

import pytest

from ptlab.vm.image import DEFAULT_CACHE, Image, default_inputs

OPT_IN = "PTLAB_VM_TESTS"


def cached_image() -> Image:
    """The image ``ptlab vm image`` built for this checkout; skips the calling test
    when it is not cached or the VM tests were not asked for."""
    image = Image(DEFAULT_CACHE / default_inputs().digest(), default_inputs())
    if not image.complete():
        pytest.skip(f"no cached image at {image.dir}: run 'ptlab vm image' first")
    if os.environ.get(OPT_IN) != "1":
        pytest.skip(f"boots VMs under TCG for minutes: set {OPT_IN}=1 to run it "
                    "(docs/lab/testing.md §5)")
    return image
