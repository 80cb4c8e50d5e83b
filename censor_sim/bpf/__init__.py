"""The censor's kernel fast path: detectors as eBPF programs on the router's
interfaces, reporting to the Python censor only what its policy acts on.

Each program here is a second implementation of a Python detector, which stays
the reference; the tests run both on the same bytes (the kernel's through
BPF_PROG_TEST_RUN) and require the same answer. docs/lab/censor.md says where
the two may differ and why.
"""

KERNEL_DETECTORS = frozenset({"fet"})
"""Detector kinds with a kernel program here (``datapath.fast_path = "ebpf"``)."""
