"""Compile this package's eBPF programs with clang, once per source text.

Why at first use, not at install: the object depends on the machine's clang and
kernel headers, and the lab's heavier needs come from Debian (scripts/setup
installs clang and libbpf-dev). The object is cached under the user's cache
directory, named by the SHA-256 of the source, so an edited program is rebuilt
and an unchanged one is not.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path


class BpfUnavailable(RuntimeError):
    """The machine cannot build or load eBPF programs (no clang, no libbpf, no privilege)."""


class BpfBuildError(RuntimeError):
    """clang rejected a program; the message carries its diagnostics."""


SOURCES = Path(__file__).parent


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/ptlab/bpf, or ~/.cache/ptlab/bpf."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ptlab" / "bpf"


def _include_dirs() -> list[str]:
    """The multiarch include directory, where Debian keeps <asm/types.h>; clang's
    BPF target does not search it by itself."""
    multiarch = f"/usr/include/{platform.machine()}-linux-gnu"
    return [f"-I{multiarch}"] if Path(multiarch).is_dir() else []


def compiled(name: str, clang: str | None = None) -> Path:
    """The object file of ``<name>.bpf.c`` in this package, compiling it if needed.

    BpfUnavailable without clang; BpfBuildError with clang's output when the
    source does not compile."""
    source = SOURCES / f"{name}.bpf.c"
    text = source.read_bytes()
    out = cache_dir() / f"{name}-{hashlib.sha256(text).hexdigest()[:16]}.o"
    if out.exists():
        return out
    clang = clang or shutil.which("clang")
    if not clang:
        raise BpfUnavailable("the censor's kernel fast path needs clang to build its eBPF "
                             "program: apt-get install clang libbpf-dev (scripts/setup does)")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Into a temporary name, then renamed: two censors starting at once never
    # load a half-written object.
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".o.tmp")
    os.close(fd)
    try:
        done = subprocess.run([clang, "-O2", "-g", "-target", "bpf", "-Wall", "-Werror",
                               *_include_dirs(), "-c", str(source), "-o", tmp],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BpfBuildError(f"clang could not build {source.name}:\n{done.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
