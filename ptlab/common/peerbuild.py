"""``scripts/setup --peers``: build the pinned real peers from their Go modules.

Each peer is built in a throwaway main module (``.peers/src/<peer>/go.mod``)
that requires the pinned module and carries over the module's own ``go``,
``godebug``, ``replace`` and ``exclude`` directives (docs/lab/peers.md §1.2):

- ``go``/``godebug`` because the main module's go line sets the binary's
  GODEBUG defaults: under a made-up ``go 1.22`` a peer written for Go 1.24 would
  run with 1.22's defaults (no ML-KEM key share in its TLS ClientHello, for
  one), and its fingerprint would be one the real peer never sends;
- ``replace`` because the upstream build is a build in the module's checkout,
  where its replacements hold: lyrebird swaps in a uTLS fork, the Conjure client
  a pion/dtls fork it cannot compile without;
- the pinned module stays a dependency, so its version and checksum are stamped
  in the binary's build info, as ``go install pkg@version`` would stamp them.

``go install pkg@version`` itself is not used: it asks the module proxy for the
module's version list (for deprecation), which the proxy refuses, and it
rejects any module whose go.mod has ``replace`` directives (§2.1).

A module the proxy refuses is reported with its path, version and the proxy's
answer, and recorded in the manifest (§2.3); the other peers are built all the
same, and the command fails only for other errors (a compile error is ours to
fix, a refusal is not).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .peers import (
    MANIFEST,
    MANIFEST_SCHEMA,
    PINS,
    Pin,
    load_pins,
    peers_dir,
    read_manifest,
    sha256_file,
)

Say = Callable[[str], None]


# -- the pinned module's own go.mod ----------------------------------------------

@dataclass(frozen=True)
class ModuleDirectives:
    """What the throwaway main module takes over from the pinned module's go.mod."""

    go: str
    godebug: tuple[str, ...] = ()
    replace: tuple[str, ...] = ()  # "old [version] => new [version]"
    exclude: tuple[str, ...] = ()


_CARRIED = ("go", "godebug", "replace", "exclude")


def parse_gomod(text: str) -> ModuleDirectives:
    """The directives of a go.mod that a build in its checkout obeys.

    A ValueError names a ``replace`` that points at a directory: only the
    module's own checkout has it, so no build from the module proxy can follow it.
    """
    found: dict[str, list[str]] = {k: [] for k in _CARRIED}
    block: str | None = None
    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
            elif block in found:
                found[block].append(" ".join(line.split()))
            continue
        verb, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest == "(":
            block = verb
        elif verb in found:
            found[verb].append(" ".join(rest.split()))
    for rule in found["replace"]:
        target = rule.split("=>", 1)[1].strip() if "=>" in rule else ""
        if target.startswith(("./", "../", "/")) or target in (".", ".."):
            raise ValueError(f"go.mod replaces with a directory ({rule}): only the module's "
                             "checkout has it")
    if not found["go"]:
        raise ValueError("go.mod has no go directive")
    return ModuleDirectives(found["go"][0], tuple(found["godebug"]), tuple(found["replace"]),
                            tuple(found["exclude"]))


def _block(verb: str, lines: tuple[str, ...]) -> str:
    if not lines:
        return ""
    body = "".join(f"\t{line}\n" for line in lines)
    return f"\n{verb} (\n{body})\n"


def main_module(pin: Pin, directives: ModuleDirectives) -> str:
    """The throwaway main module's go.mod."""
    return (f"module ptlab.invalid/peers/{pin.name}\n\ngo {directives.go}\n"
            f"{_block('godebug', directives.godebug)}"
            f"\nrequire {pin.module} {pin.version}\n"
            f"{_block('replace', directives.replace)}{_block('exclude', directives.exclude)}")


# -- the module proxy's refusals -------------------------------------------------

_REFUSAL = re.compile(
    r"reading (?P<url>https?://\S+?/@v/(?:(?P<version>[^/\s]+?)\.(?:zip|mod|info)|list)):"
    r" (?P<status>\d{3}[^\n]*)(?:\n\s*server response:\s*(?P<response>[^\n]*))?")


def _unescape(path: str) -> str:
    """A module path from its proxy form ("!open!g!f!w" is "OpenGFW")."""
    return re.sub(r"!([a-z])", lambda m: m.group(1).upper(), path)


def _proxy_bases() -> list[str]:
    raw = os.environ.get("GOPROXY") or "https://proxy.golang.org"
    return [b.rstrip("/") for b in re.split(r"[,|]", raw) if b.startswith("http")]


def refusals(output: str, bases: list[str] | None = None) -> list[dict[str, str]]:
    """Every module the proxy refused in a go command's output: module path,
    version ("" for a version list), the URL and the proxy's answer, once each."""
    bases = bases if bases is not None else _proxy_bases()
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for m in _REFUSAL.finditer(output):
        url = m["url"]
        path = url.split("/@v/", 1)[0]
        for base in sorted(bases, key=len, reverse=True):
            if path.startswith(base + "/"):
                path = path[len(base) + 1:]
                break
        else:
            path = path.split("://", 1)[1].split("/", 1)[1]
        module, version = _unescape(path), _unescape(m["version"] or "")
        answer = m["status"] + (f": {m['response']}" if m["response"] else "")
        seen.setdefault((module, version),
                        {"module": module, "version": version, "url": url, "answer": answer})
    return list(seen.values())


class BuildFailed(Exception):
    """A peer that was not built: the go command's last lines, and what it could not
    fetch from the module proxy (empty when the failure was something else)."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.refused = refusals(output)
        super().__init__("\n".join(output.strip().splitlines()[-6:]))


# -- the build -------------------------------------------------------------------

def up_to_date(pin: Pin, entry: dict[str, Any] | None, base: Path) -> bool:
    """The manifest's entry was built from this pin and its binaries are unchanged."""
    if not entry or entry.get("key") != pin.key or set(entry.get("tools", {})) != set(pin.packages):
        return False
    for info in entry["tools"].values():
        path = base / info["path"]
        if not path.is_file() or sha256_file(path) != info["sha256"]:
            return False
    return True


def _go_env(pin: Pin) -> dict[str, str]:
    # CGO off, as lyrebird's Makefile builds it: a static binary that runs in any
    # namespace and on the VMs.
    env = dict(os.environ, CGO_ENABLED="0")
    if pin.go:
        env["GOTOOLCHAIN"] = pin.go
    return env


def _go(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a go command; its combined output, or BuildFailed with it."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise BuildFailed(output)
    return done.stdout


def download(go: str, pin: Pin, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """``go mod download -json`` of the pinned module: its Sum and the path of its
    go.mod in the module cache (checked against sum.golang.org on the way)."""
    done = subprocess.run([go, "mod", "download", "-json", f"{pin.module}@{pin.version}"],
                          cwd=cwd, env=env, capture_output=True, text=True)
    try:
        info: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise BuildFailed(done.stdout + done.stderr) from None
    if info.get("Error") or done.returncode != 0:
        raise BuildFailed(str(info.get("Error") or done.stderr))
    return info


def build_info(go: str, binary: Path, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(Go version, {module: "version sum"}) from a binary's build info."""
    done = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        raise BuildFailed(f"go version -m {binary.name}: {done.stdout}{done.stderr}")
    out = done.stdout
    go_version = out.splitlines()[0].split(":", 1)[1].strip()
    modules = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] in ("mod", "dep"):
            modules[fields[1]] = " ".join(fields[2:4])
    return go_version, modules


def build_one(pin: Pin, base: Path, go: str = "go") -> dict[str, Any]:
    """Build ``pin``'s packages into ``base/bin``; its manifest entry.

    Raises BuildFailed (with the go command's output) when the build fails.
    """
    src = base / "src" / pin.name
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    env = _go_env(pin)
    started = time.monotonic()
    # A bare go.mod first, so that `go mod download` runs in a module of ours.
    (src / "go.mod").write_text(f"module ptlab.invalid/peers/{pin.name}\n")
    fetched = download(go, pin, src, env)
    try:
        directives = parse_gomod(Path(fetched["GoMod"]).read_text())
    except (OSError, ValueError) as exc:
        raise BuildFailed(f"{pin.module}@{pin.version}: {exc}") from None
    (src / "go.mod").write_text(main_module(pin, directives))
    bindir = base / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    tools = {}
    for tool, package in pin.packages.items():
        out = bindir / tool
        tmp = bindir / f".{tool}.building"
        # -mod=mod: go fills in go.sum from the module's own requirements and checks
        # every sum against sum.golang.org.
        cmd = [go, "build", "-mod=mod", "-trimpath", "-o", str(tmp)]
        if pin.tags:
            cmd += ["-tags", ",".join(pin.tags)]
        if pin.ldflags:
            cmd += ["-ldflags", pin.rendered_ldflags()]
        cmd.append(pin.package_path(package))
        _go(cmd, src, env)
        tmp.replace(out)
        tools[tool] = {"package": pin.package_path(package),
                       "path": str(out.relative_to(base)), "sha256": sha256_file(out)}
    go_version, modules = build_info(go, out, env)
    stamped = modules.get(pin.module, "").split()
    if not stamped or stamped[0] != pin.version:
        raise BuildFailed(f"{out.name}: build info has {pin.module} "
                          f"{' '.join(stamped) or 'missing'}, not {pin.version}")
    return {"key": pin.key, "module": pin.module, "version": pin.version,
            "module_sum": fetched.get("Sum") or (stamped[1] if len(stamped) > 1 else None),
            "go": go_version, "go_directive": directives.go, "tags": list(pin.tags),
            "ldflags": pin.rendered_ldflags(), "replace": list(directives.replace),
            "tools": tools, "build_seconds": round(time.monotonic() - started, 1),
            "built_at": datetime.now(UTC).isoformat(timespec="seconds")}


def _write_manifest(base: Path, manifest: dict[str, Any]) -> None:
    tmp = base / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(base / MANIFEST)


@dataclass
class Outcome:
    """What a build run did: peers built, up to date, refused, failed otherwise."""

    built: list[str]
    current: list[str]
    refused: list[str]
    failed: list[str]


def build(pins: list[Pin], base: Path, go: str = "go", say: Say = print,
          pinned: set[str] | None = None) -> Outcome:
    """Build what is not up to date.

    A peer that fails is reported with the go command's last lines (and, when the
    module proxy refused a module, that module and the proxy's answer), and
    recorded under ``failed``; the others are built all the same. ``pinned``
    (default: ``pins``' names) is every peer the pins file still names; the
    manifest forgets the rest.
    """
    base.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(base)
    manifest["schema"] = MANIFEST_SCHEMA
    outcome = Outcome([], [], [], [])
    for pin in pins:
        entry = manifest["peers"].get(pin.name)
        if up_to_date(pin, entry, base):
            say(f"{pin.name}: {pin.module}@{pin.version} up to date")
            manifest["failed"].pop(pin.name, None)
            outcome.current.append(pin.name)
            continue
        say(f"{pin.name}: building {pin.module}@{pin.version} "
            f"({', '.join(pin.packages)}{'; tags ' + ','.join(pin.tags) if pin.tags else ''})")
        try:
            manifest["peers"][pin.name] = build_one(pin, base, go)
        except BuildFailed as exc:
            manifest["peers"].pop(pin.name, None)
            record: dict[str, Any] = {"module": pin.module, "version": pin.version,
                                      "error": str(exc)}
            if exc.refused:
                record["refused"] = exc.refused
                outcome.refused.append(pin.name)
                for r in exc.refused:
                    say(f"{pin.name}: NOT BUILT: the module proxy refused "
                        f"{r['module']}@{r['version'] or '(version list)'}: {r['answer']}")
            else:
                outcome.failed.append(pin.name)
                say(f"{pin.name}: FAILED\n{exc}")
            manifest["failed"][pin.name] = record
        else:
            manifest["failed"].pop(pin.name, None)
            outcome.built.append(pin.name)
            say(f"{pin.name}: built in {manifest['peers'][pin.name]['build_seconds']} s")
        _write_manifest(base, manifest)
    # Peers no longer pinned are dropped from the manifest (their binaries stay
    # until the directory is removed; nothing finds them any more).
    pinned = pinned if pinned is not None else {p.name for p in pins}
    manifest["peers"] = {k: v for k, v in manifest["peers"].items() if k in pinned}
    manifest["failed"] = {k: v for k, v in manifest["failed"].items() if k in pinned}
    _write_manifest(base, manifest)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ptlab.common.peerbuild",
        description="Build the real peers pinned in scripts/peers.toml into .peers/ "
                    "(docs/lab/peers.md). Exit status 1 when a peer failed to build for "
                    "any reason but the module proxy refusing a module.")
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
        unknown = set(args.only) - every
        if unknown:
            print(f"peers: not pinned: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        pins = [p for p in pins if p.name in args.only]
    if shutil.which(args.go) is None:
        print(f"peers: no {args.go} command: install Go (1.22 or newer)", file=sys.stderr)
        return 2
    started = time.monotonic()
    outcome = build(pins, args.dir or peers_dir(), args.go,
                    lambda m: print(f"peers: {m}", file=sys.stderr, flush=True), every)
    def named(names: list[str]) -> str:
        return f" ({', '.join(names)})" if names else ""

    print(f"peers: done in {time.monotonic() - started:.0f} s: {len(outcome.built)} built, "
          f"{len(outcome.current)} up to date, {len(outcome.refused)} refused by the module "
          f"proxy{named(outcome.refused)}, {len(outcome.failed)} failed{named(outcome.failed)}",
          file=sys.stderr)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
