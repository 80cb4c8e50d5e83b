"""Identity keys for a private Tor network, made with tor's own tools.

* Directory authorities need a v3 authority identity, a signing key and a
  certificate: ``tor-gencert --create-identity-key`` makes them (the
  passphrase comes on a file descriptor, so no terminal is needed) into the
  authority's ``keys/`` directory. Its ``v3ident`` is the ``fingerprint``
  line of the certificate.
* Every relay (authorities and bridges too) has an RSA identity:
  ``tor --list-fingerprint`` creates it in the node's data directory, where
  tor later finds it, and prints it. An ORPort must be given, or tor refuses
  ("Clients don't have long-term identity keys").
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_FP = re.compile(r"^[0-9A-F]{40}$")


class TorKeyError(RuntimeError):
    """tor or tor-gencert failed, with what they said."""


def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise TorKeyError(f"{argv[0]} is not installed (Debian package tor; scripts/setup)") \
            from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise TorKeyError(f"{' '.join(argv[:2])} failed: {' | '.join(tail)}")
    return proc.stdout


def authority_keys(datadir: Path, address: str, dirport: int, months: int = 12) -> str:
    """Create an authority's v3 keys and certificate; return its v3ident."""
    keys = Path(datadir) / "keys"
    keys.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert = keys / "authority_certificate"
    if not cert.exists():
        _run(["tor-gencert", "--create-identity-key", "--passphrase-fd", "0",
              "-i", str(keys / "authority_identity_key"),
              "-s", str(keys / "authority_signing_key"), "-c", str(cert),
              "-m", str(months), "-a", f"{address}:{dirport}"], stdin="ptlab-testnet\n")
    for line in cert.read_text().splitlines():
        if line.startswith("fingerprint "):
            ident = line.split()[1]
            if _FP.match(ident):
                return ident
    raise TorKeyError(f"{cert}: no fingerprint line")


def relay_fingerprint(datadir: Path) -> str:
    """Create (or read) a node's RSA identity in `datadir`; return its fingerprint."""
    datadir = Path(datadir)
    datadir.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = _run(["tor", "--ignore-missing-torrc", "-f", "/dev/null", "--DataDirectory",
                str(datadir), "--ORPort", "1", "--list-fingerprint", "--quiet"])
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    if lines:
        fp = "".join(lines[-1].split()[1:])
        if _FP.match(fp):
            return fp
    raise TorKeyError(f"tor --list-fingerprint printed no fingerprint: {out[-200:]!r}")
