"""The real peers built from their Go modules: pins, the manifest, and finding them.

ptlab's claim is wire compatibility with the real systems, and the real systems'
current releases are Go modules that Debian does not ship (lyrebird, Snowflake's
current release, WebTunnel's server, Refraction Networking's Conjure client,
sing-box with ``with_utls``, Xray, OpenGFW). ``scripts/setup --peers`` builds them
(:mod:`ptlab.common.peerbuild`) at the versions pinned in ``scripts/peers.toml``
into ``.peers/`` in the checkout, and ``.peers/manifest.json`` records for every
binary its module path, version, the module's checksum, Go version, build tags,
ldflags, the replacements applied and SHA-256; a peer that could not be built is
recorded with why, the module proxy's answer included (docs/lab/peers.md §1, §2).

:func:`locate` is how :mod:`ptlab.common.tools` finds a built peer by tool name,
:func:`provenance` is what a run records of them, and :class:`ToolMissing` is
what a test that needs an absent peer skips with.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: The checkout (ptlab is installed editable from it, docs/architecture.md §2.1).
CHECKOUT = Path(__file__).resolve().parents[2]
PINS = CHECKOUT / "scripts" / "peers.toml"
ENV_DIR = "PTLAB_PEERS_DIR"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
BUILD_COMMAND = "scripts/setup --peers"
#: Bumped whenever the way a peer is built changes (peerbuild), so that every
#: peer built the old way counts as out of date and is rebuilt.
RECIPE = 2


def peers_dir() -> Path:
    """Where the peers are: ``$PTLAB_PEERS_DIR``, else ``.peers/`` in the checkout."""
    return Path(os.environ.get(ENV_DIR) or CHECKOUT / ".peers")


@dataclass(frozen=True)
class Pin:
    """One peer as ``scripts/peers.toml`` pins it."""

    name: str
    module: str
    version: str
    packages: dict[str, str]  # tool name -> package path inside the module ("" = root)
    tags: tuple[str, ...] = ()
    ldflags: str = ""
    go: str = ""  # a newer toolchain to export as GOTOOLCHAIN, "" for the local one

    @property
    def key(self) -> str:
        """What the binaries depend on: a change here (or to :data:`RECIPE`), and only
        here, rebuilds them."""
        text = json.dumps([RECIPE, self.module, self.version, sorted(self.packages.items()),
                           list(self.tags), self.ldflags, self.go], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def package_path(self, package: str) -> str:
        return f"{self.module}/{package}" if package else self.module

    def rendered_ldflags(self) -> str:
        return self.ldflags.replace("{version}", self.version).replace(
            "{number}", self.version.removeprefix("v"))


_PIN_KEYS = {"module", "version", "packages", "tags", "ldflags", "go"}


def load_pins(path: Path = PINS) -> list[Pin]:
    """The pins, in file order; a ValueError names a table that is malformed."""
    data = tomllib.loads(path.read_text())
    pins = []
    for name, table in data.items():
        if not isinstance(table, dict) or not {"module", "version", "packages"} <= table.keys():
            raise ValueError(f"{path}: [{name}] needs module, version and packages")
        unknown = set(table) - _PIN_KEYS
        if unknown:
            raise ValueError(f"{path}: [{name}] has unknown keys {sorted(unknown)}")
        if not isinstance(table["packages"], dict) or not table["packages"]:
            raise ValueError(f"{path}: [{name}] packages must name at least one tool")
        pins.append(Pin(name, table["module"], table["version"], dict(table["packages"]),
                        tuple(table.get("tags", ())), table.get("ldflags", ""),
                        table.get("go", "")))
    return pins


def read_manifest(directory: Path | None = None) -> dict[str, Any]:
    """The manifest, or an empty one when nothing was built."""
    path = (directory or peers_dir()) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema": MANIFEST_SCHEMA, "peers": {}, "failed": {}}
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        return {"schema": MANIFEST_SCHEMA, "peers": {}, "failed": {}}
    data.setdefault("peers", {})
    data.setdefault("failed", {})
    return data


def _tools(manifest: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for peer, entry in manifest.get("peers", {}).items():
        for tool, info in entry.get("tools", {}).items():
            out[tool] = (peer, info)
    return out


def locate(name: str, directory: Path | None = None) -> tuple[str, str] | None:
    """(path, source) of built peer tool ``name``, or None when it was not built."""
    base = directory or peers_dir()
    manifest = read_manifest(base)
    found = _tools(manifest).get(name)
    if found is None:
        return None
    peer, info = found
    path = base / info["path"]
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None
    entry = manifest["peers"][peer]
    return str(path.resolve()), f"peers {entry['module']}@{entry['version']}"


def why_missing(name: str, directory: Path | None = None, pins: Path = PINS) -> str:
    """Why tool ``name`` is not built, as a skip reason: the peer, the command that
    builds it and, when the last build failed, why (a refused module named with
    the proxy's answer)."""
    peer = next((p for p in _pins_or_empty(pins) if name in p.packages), None)
    what = f"peer {name}" + (f" ({peer.module}@{peer.version})" if peer else "")
    reason = f"{what} is not built: run `{BUILD_COMMAND}` (pinned in scripts/peers.toml)"
    failure = read_manifest(directory).get("failed", {}).get(peer.name if peer else "")
    if not failure:
        return reason
    refused = failure.get("refused") or []
    if refused:
        first = refused[0]
        return (f"{reason}; its last build could not fetch {first['module']}@"
                f"{first['version']}: the module proxy answered {first['answer']}")
    return f"{reason}; its last build failed: {failure.get('error', '?').splitlines()[-1]}"


def _pins_or_empty(path: Path) -> list[Pin]:
    try:
        return load_pins(path)
    except (OSError, ValueError):
        return []


def require(name: str) -> str:
    """Path of built peer tool ``name``; for tests, which skip on the ToolMissing."""
    found = locate(name)
    if found is None:
        raise ToolMissing(name)
    return found[0]


class ToolMissing(LookupError):
    """A peer tool that is not built; the message names it and the build command."""

    def __init__(self, name: str, directory: Path | None = None) -> None:
        super().__init__(why_missing(name, directory))
        self.tool = name


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file: a built peer's, a tool's, a profile's text a run pins."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=64)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    """The hash of a file as it is now (size and mtime key the cache, so a run that
    records provenance often hashes each binary once)."""
    return sha256_file(Path(path))


def current_sha256(path: Path) -> str | None:
    """SHA-256 of the file now, None when it is gone."""
    try:
        st = path.stat()
    except OSError:
        return None
    return _sha256_cached(str(path), st.st_size, st.st_mtime_ns)


def provenance(directory: Path | None = None) -> dict[str, Any]:
    """Every built peer binary as a run records it: module, version, module sum, Go
    version, build tags, ldflags, replacements, SHA-256, and whether the binary on
    disk still has that SHA-256 (``verified``)."""
    base = directory or peers_dir()
    manifest = read_manifest(base)
    out: dict[str, Any] = {}
    for peer, entry in manifest.get("peers", {}).items():
        for tool, info in entry.get("tools", {}).items():
            out[tool] = {"peer": peer, "module": entry["module"], "version": entry["version"],
                         "module_sum": entry.get("module_sum"), "go": entry.get("go"),
                         "tags": entry.get("tags", []), "ldflags": entry.get("ldflags", ""),
                         "replace": entry.get("replace", []),
                         "package": info["package"], "sha256": info["sha256"],
                         "verified": current_sha256(base / info["path"]) == info["sha256"]}
    return out


def failures(directory: Path | None = None) -> dict[str, Any]:
    """The pinned peers whose last build failed: module, version, and the modules
    the module proxy refused (with its answer), as a run records them."""
    return {peer: {k: v for k, v in entry.items() if k in ("module", "version", "refused")}
            for peer, entry in read_manifest(directory).get("failed", {}).items()}
