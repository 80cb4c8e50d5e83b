"""Running system commands (ip, nft, tc) with errors that name the problem.

Every mutation of the kernel's network state goes through here, so a missing
tool or a failing command becomes one clear line instead of a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from .errors import LabError, MissingToolError, NotRootError

# What to install when a tool is missing (Debian package names).
TOOL_PACKAGES = {
    "ip": "iproute2",
    "tc": "iproute2",
    "nft": "nftables",
    "iptables": "iptables",
    "tcpdump": "tcpdump",
}


def require_root() -> None:
    """Fail in one line unless we are root: namespaces and nftables need it."""
    if os.geteuid() != 0:
        raise NotRootError("needs root (network namespaces, veth and nftables): run as root")


def require_tools(*tools: str) -> None:
    """Fail in one line naming the first missing tool and its Debian package."""
    for tool in tools:
        if which(tool) is None:
            pkg = TOOL_PACKAGES.get(tool, tool)
            raise MissingToolError(
                f"missing system tool '{tool}' (Debian package {pkg}): run scripts/setup"
            )


def which(tool: str) -> str | None:
    """Find a tool on PATH, also looking in the sbin directories root uses."""
    path = os.environ.get("PATH", "")
    if os.environ.get("PTLAB_NO_SBIN"):  # tests: look only where PATH says
        return shutil.which(tool, path=path)
    extra = "/usr/local/sbin:/usr/sbin:/sbin"
    return shutil.which(tool, path=f"{path}:{extra}" if path else extra)


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 30.0,
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise LabError quoting the command and its stderr."""
    exe = which(argv[0])
    if exe is None:
        require_tools(argv[0])
    try:
        proc = subprocess.run(
            [exe or argv[0], *argv[1:]],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"command timed out after {timeout:.0f}s: {' '.join(argv)}") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = msg[-1] if msg else f"exit {proc.returncode}"
        raise LabError(f"'{' '.join(argv)}' failed: {detail}")
    return proc
