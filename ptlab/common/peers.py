"""The real peers built from their Go modules: pins, the build, and the manifest.

ptlab's claim is wire compatibility with the real systems, and the real systems'
current releases are Go modules that Debian does not ship (lyrebird, Snowflake's
current release, WebTunnel's server, Refraction Networking's Conjure client,
sing-box with ``with_utls``, Xray, OpenGFW). ``scripts/setup --peers`` builds them
at the versions pinned in ``scripts/peers.toml`` into ``.peers/`` in the checkout
(docs/lab/peers.md §1):

- each peer is built in a throwaway main module that requires the pinned module
  and nothing else, so dependency selection is the module's own go.mod, as with
  ``go install pkg@version`` (which cannot be used here: it asks the proxy for the
  module's version list to check deprecation, and the proxy refuses most lists,
  docs/lab/peers.md §2);
- a peer is rebuilt only when its pin changes (its table's hash);
- ``.peers/manifest.json`` records for every binary its module path, version, the
  module's checksum, Go version, build tags, ldflags and SHA-256.

:func:`locate` is how :mod:`ptlab.common.tools` finds a built peer by tool name,
and :func:`provenance` is what a run records of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The checkout (ptlab is installed editable from it, docs/architecture.md §2.1).
CHECKOUT = Path(__file__).resolve().parents[2]
PINS = CHECKOUT / "scripts" / "peers.toml"
ENV_DIR = "PTLAB_PEERS_DIR"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
BUILD_COMMAND = "scripts/setup --peers"


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
    # The peer's own go.mod `replace` lines ("old => new version"), which Go applies
    # only in the main module: restated in the throwaway one, or the build fails.
    replace: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What the binaries depend on: a change here, and only here, rebuilds them."""
        text = json.dumps([self.module, self.version, sorted(self.packages.items()),
                           list(self.tags), self.ldflags, self.go]
                          + ([list(self.replace)] if self.replace else []), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def package_path(self, package: str) -> str:
        return f"{self.module}/{package}" if package else self.module

    def rendered_ldflags(self) -> str:
        return self.ldflags.replace("{version}", self.version).replace(
            "{number}", self.version.removeprefix("v"))


_PIN_KEYS = {"module", "version", "packages", "tags", "ldflags", "go", "replace"}


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
        pins.append(Pin(name, table["module"], table["version"], dict(table["packages"]),
                        tuple(table.get("tags", ())), table.get("ldflags", ""),
                        table.get("go", ""), tuple(table.get("replace", ()))))
    return pins


def read_manifest(directory: Path | None = None) -> dict[str, Any]:
    """The manifest, or an empty one when nothing was built."""
    path = (directory or peers_dir()) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema": MANIFEST_SCHEMA, "peers": {}}
    if data.get("schema") != MANIFEST_SCHEMA:
        return {"schema": MANIFEST_SCHEMA, "peers": {}}
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


def require(name: str) -> str:
    """Path of built peer tool ``name``; for tests, which skip on the ToolMissing."""
    found = locate(name)
    if found is None:
        raise ToolMissing(name)
    return found[0]


class ToolMissing(LookupError):
    """A peer tool that is not built; the message names it and the build command."""

    def __init__(self, name: str) -> None:
        super().__init__(f"peer {name} is not built: run `{BUILD_COMMAND}` "
                         f"(pinned in scripts/peers.toml)")
        self.tool = name


def provenance(directory: Path | None = None) -> dict[str, Any]:
    """Every built peer binary as a run records it: module, version, module sum,
    Go version, build tags, ldflags, SHA-256."""
    manifest = read_manifest(directory)
    out: dict[str, Any] = {}
    for peer, entry in manifest.get("peers", {}).items():
        for tool, info in entry.get("tools", {}).items():
            out[tool] = {"peer": peer, "module": entry["module"], "version": entry["version"],
                         "module_sum": entry.get("module_sum"), "go": entry.get("go"),
                         "tags": entry.get("tags", []), "ldflags": entry.get("ldflags", ""),
                         "package": info["package"], "sha256": info["sha256"]}
    return out


# -- the build -------------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def up_to_date(pin: Pin, entry: dict[str, Any] | None, base: Path) -> bool:
    """The manifest's entry was built from this pin and its binaries are unchanged."""
    if not entry or entry.get("key") != pin.key or set(entry.get("tools", {})) != set(pin.packages):
        return False
    for info in entry["tools"].values():
        path = base / info["path"]
        if not path.is_file() or _sha256(path) != info["sha256"]:
            return False
    return True


def _go_env(pin: Pin) -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0")
    if pin.go:
        env["GOTOOLCHAIN"] = pin.go
    return env


def _module_sum(go: str, binary: Path, module: str, env: dict[str, str]) -> tuple[str, str | None]:
    """(Go version, the pinned module's h1: checksum) from the binary's build info."""
    out = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True,
                         env=env, check=True).stdout
    go_version = out.splitlines()[0].split(":", 1)[1].strip()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0] == "dep" and fields[1] == module:
            return go_version, fields[3]
    return go_version, None


def build_one(pin: Pin, base: Path, go: str = "go") -> dict[str, Any]:
    """Build ``pin``'s packages into ``base/bin``; its manifest entry.

    Raises CalledProcessError (with the go command's output) when the build fails.
    """
    src = base / "src" / pin.name
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    # A main module that requires the peer and nothing else: go fills in the rest
    # from the peer's own go.mod (-mod=mod) and checks every sum against sum.golang.org.
    (src / "go.mod").write_text(f"module ptlab.invalid/peers/{pin.name}\n\ngo 1.22\n\n"
                                f"require {pin.module} {pin.version}\n"
                                + "".join(f"\nreplace {r}\n" for r in pin.replace))
    env = _go_env(pin)
    bindir = base / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tools = {}
    for tool, package in pin.packages.items():
        out = bindir / tool
        tmp = bindir / f".{tool}.building"
        cmd = [go, "build", "-mod=mod", "-trimpath", "-o", str(tmp)]
        if pin.tags:
            cmd += ["-tags", ",".join(pin.tags)]
        if pin.ldflags:
            cmd += ["-ldflags", pin.rendered_ldflags()]
        cmd.append(pin.package_path(package))
        subprocess.run(cmd, cwd=src, env=env, check=True, capture_output=True, text=True)
        tmp.replace(out)
        tools[tool] = {"package": pin.package_path(package),
                       "path": str(out.relative_to(base)), "sha256": _sha256(out)}
    go_version, module_sum = _module_sum(go, out, pin.module, env)
    return {"key": pin.key, "module": pin.module, "version": pin.version,
            "module_sum": module_sum, "go": go_version, "tags": list(pin.tags),
            "ldflags": pin.rendered_ldflags(), "tools": tools,
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": datetime.now(UTC).isoformat(timespec="seconds")}


def _write_manifest(base: Path, manifest: dict[str, Any]) -> None:
    tmp = base / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(base / MANIFEST)


def build(pins: list[Pin], base: Path, go: str = "go", say: Any = print,
          pinned: set[str] | None = None) -> int:
    """Build what is not up to date; the number of peers that failed.

    A peer that fails (the module proxy refuses a version, a compile error) is
    reported with the go command's last lines and recorded under ``failed``;
    the others are built all the same. ``pinned`` (default: ``pins``' names) is
    every peer the pins file still names; the manifest forgets the rest.
    """
    base.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(base)
    manifest["failed"] = {}
    failed = 0
    for pin in pins:
        entry = manifest["peers"].get(pin.name)
        if up_to_date(pin, entry, base):
            say(f"{pin.name}: {pin.module}@{pin.version} up to date")
            continue
        say(f"{pin.name}: building {pin.module}@{pin.version} "
            f"({', '.join(pin.packages)}{'; tags ' + ','.join(pin.tags) if pin.tags else ''})")
        try:
            manifest["peers"][pin.name] = build_one(pin, base, go)
        except subprocess.CalledProcessError as exc:
            failed += 1
            tail = "\n".join((exc.stderr or exc.stdout or "").strip().splitlines()[-6:])
            say(f"{pin.name}: FAILED\n{tail}")
            manifest["peers"].pop(pin.name, None)
            manifest["failed"][pin.name] = {"module": pin.module, "version": pin.version,
                                            "error": tail}
        else:
            say(f"{pin.name}: built in {manifest['peers'][pin.name]['build_seconds']} s")
        _write_manifest(base, manifest)
    # Peers no longer pinned are dropped from the manifest (their binaries stay
    # until the directory is removed; nothing finds them any more).
    pinned = pinned if pinned is not None else {p.name for p in pins}
    manifest["peers"] = {k: v for k, v in manifest["peers"].items() if k in pinned}
    _write_manifest(base, manifest)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ptlab.common.peers",
        description="Build the real peers pinned in scripts/peers.toml into .peers/ "
                    "(docs/lab/peers.md).")
    parser.add_argument("--pins", type=Path, default=PINS)
    parser.add_argument("--dir", type=Path, default=None,
                        help="default: .peers/ or $PTLAB_PEERS_DIR")
    parser.add_argument("--only", action="append", default=[], metavar="PEER",
                        help="build only this peer (repeatable)")
    parser.add_argument("--go", default="go", help="the go command")
    args = parser.parse_args(argv)
    try:
        pins = load_pins(args.pins)
    except (OSError, ValueError) as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 2
    every = {p.name for p in pins}
    if args.only:
        unknown = set(args.only) - {p.name for p in pins}
        if unknown:
            print(f"peers: not pinned: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        pins = [p for p in pins if p.name in args.only]
    if shutil.which(args.go) is None:
        print(f"peers: no {args.go} command: install Go (1.22 or newer)", file=sys.stderr)
        return 2
    started = time.monotonic()
    failed = build(pins, args.dir or peers_dir(), args.go,
                   lambda m: print(f"peers: {m}", file=sys.stderr, flush=True), every)
    print(f"peers: done in {time.monotonic() - started:.0f} s, {failed} failed",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
