"""``python -m censor_sim --config FILE``: the censor process of the censor namespace.

It installs the kernel datapath for a profile, binds the NFQUEUE queues that
carry the first packets of undecided flows (or, for an on-path profile, the
NFLOG groups that carry copies of them, or with ``datapath.fast_path`` the
kernel program that judges them itself), runs the policy engine on them,
injects forged packets, and reports every detection, action and probe as a
JSON line. On SIGTERM it reports its final counters, CPU time and per-packet
cost, then removes everything it installed.

Config keys: ``profile``, ``overrides``, ``inside`` and ``outside`` (the
censor's client-side and world-side interfaces; needed by profiles that
inspect packets), ``seed``, ``prober`` ("HOST:PORT" of the probe service), and
``time_kernel_program`` (benchmarks: the kernel program's own run time goes in
the final counters).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import datapath
from .bpf.build import BpfBuildError, BpfUnavailable
from .profile import ProfileError
from .service import serve


def main(argv: list[str] | None = None) -> int:
    """The process's exit status: 0 once stopped, 2 for a bad config or a missing
    privilege (one line on stderr)."""
    p = argparse.ArgumentParser(prog="python -m censor_sim", description=__doc__)
    p.add_argument("--config", required=True, help="JSON file: profile, overrides, interfaces")
    p.add_argument("--poll", type=float, default=0.1, help="counter poll interval (s)")
    args = p.parse_args(argv)
    try:
        config = json.loads(Path(args.config).read_text())
        if not isinstance(config, dict) or "profile" not in config:
            raise ProfileError("config needs a 'profile' key")
        serve(config, args.poll)
    except (ProfileError, datapath.DatapathError, ValueError, OSError, BpfUnavailable,
            BpfBuildError) as exc:
        msg = str(exc)
        if isinstance(exc, PermissionError) or "Operation not permitted" in msg:
            msg = f"missing privilege: {msg} (the censor needs root / CAP_NET_ADMIN)"
        print(f"censor: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
