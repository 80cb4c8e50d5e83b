"""The wheel ships every package of the tree (an editable install would hide a gap)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("ptcommon", "transports", "broker", "censor_sim", "netns", "ptlab")


def test_every_package_is_listed_for_setuptools():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in TOP for p in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), "packages a wheel would leave out"
    assert listed - found == set(), "listed packages that do not exist"


# The lab's own dependencies (pyproject's [lab] extra), by their top-level modules.
# dnspython is not among them: aiortc's ICE (aioice) needs it too.
LAB_MODULES = ("scapy", "netfilterqueue", "sklearn", "matplotlib", "rich", "aioquic",
               "pandas")
BLOCKER = f"""
import importlib.abc, runpy, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {LAB_MODULES!r}:
            raise ImportError("lab module imported: " + name)
sys.meta_path.insert(0, Blocker())
"""


def run_without_lab(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + code], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_the_proxy_and_ptlab_pt_import_nothing_from_the_lab():
    """What a volunteer installs has no [lab] extra: the proxy, `ptlab pt` and every
    transport it serves must run without scapy, NetfilterQueue, scikit-learn and the
    rest."""
    got = run_without_lab("""
from transports import base
for name in base.names():
    base.get(name)
import transports.pt.managed, transports.snowflake.proxy_cli
sys.argv = ["ptlab", "pt", "--help"]
try:
    runpy.run_module("ptlab", run_name="__main__")
except SystemExit as e:
    assert e.code in (0, None), e.code
print("ok", len(base.names()))  # every registered transport
""")
    from transports.base import names

    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.splitlines()[-1] == f"ok {len(names())}"
    # The blocker bites: a lab module is refused.
    assert "lab module imported: scapy" in run_without_lab("import scapy").stderr


def test_the_proxy_runs_without_the_lab():
    """Started against a broker that is not there, it stays up (polling, backing off)
    with no lab module anywhere."""
    proc = subprocess.Popen([sys.executable, "-c", BLOCKER + """
sys.argv = ["ptlab", "snowflake-proxy", "-broker", "http://127.0.0.1:9/",
            "-relay", "ws://127.0.0.1:9/", "-allow-non-tls-relay"]
runpy.run_module("ptlab", run_name="__main__")
"""], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=4)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
        assert "lab module imported" not in err, err[-2000:]
        return
    raise AssertionError(f"the proxy exited ({proc.returncode}): {err[-2000:]}")


@pytest.mark.network
def test_the_wheel_installs_from_wheels_alone_and_the_proxy_starts(tmp_path):
    """A volunteer's install: our wheel into a fresh venv with --only-binary=:all: (no
    compiler, no sdists), then the proxy's help and every transport import. Prints the
    venv's size beside the lab's."""
    wheels, venv, src = tmp_path / "wheels", tmp_path / "venv", tmp_path / "src"
    # Built from a clean copy: setuptools builds in the source tree, and a stale
    # build/ there could slip removed modules into the wheel.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "results", "*.egg-info", "__pycache__", "*.pcap"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("ptlab-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--only-binary=:all:",
                           str(wheel)], capture_output=True, text=True, timeout=900)
    assert inst.returncode == 0, inst.stderr[-3000:]
    helped = subprocess.run([str(venv / "bin" / "ptlab"), "snowflake-proxy", "-h"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "-broker" in helped.stdout + helped.stderr, helped.stderr[-2000:]
    imported = subprocess.run([str(py), "-c", """
import importlib.util, sys
from transports import base
for name in base.names():
    base.get(name)
import transports.snowflake.proxy_cli
from transports.common import eventloop
assert eventloop.loop_class().__module__.startswith("uvloop"), eventloop.loop_class()
lab = [m for m in ("scapy", "netfilterqueue", "sklearn", "matplotlib", "aioquic")
       if importlib.util.find_spec(m)]
print("lab modules installed:", lab)
sys.exit(1 if lab else 0)
"""], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert imported.returncode == 0, imported.stdout + imported.stderr[-2000:]

    # Both start from it: `ptlab pt` through Tor's managed handshake, and the proxy
    # polling a broker that is not there, on uvloop.
    started = _managed_client(venv / "bin" / "ptlab", tmp_path / "pt-state", "obfs4,snowflake")
    assert started[-1] == "CMETHODS DONE", started
    assert {line.split()[1] for line in started if line.startswith("CMETHOD ")} == {
        "obfs4", "snowflake"}, started
    proxy = subprocess.Popen([str(venv / "bin" / "ptlab"), "snowflake-proxy", "-broker",
                              "http://127.0.0.1:9/", "-relay", "ws://127.0.0.1:9/",
                              "-allow-non-tls-relay"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        _, err = proxy.communicate(timeout=4)
        raise AssertionError(f"the proxy exited ({proxy.returncode}): {err[-2000:]}")
    except subprocess.TimeoutExpired:
        proxy.terminate()
        _, err = proxy.communicate(timeout=10)
    assert "uvloop event loop" in err, err[-2000:]

    def size(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())

    print(f"volunteer venv {size(venv) / 2**20:.0f} MiB; "
          f"the lab's {size(Path(sys.prefix)) / 2**20:.0f} MiB")


def _managed_client(ptlab: Path, state: Path, methods: str) -> list[str]:
    """The lines ``ptlab pt`` prints as Tor's managed client of ``methods``, up to
    CMETHODS DONE (or its end); then stdin closes, which ends it."""
    env = {"PATH": "/usr/bin:/bin", "TOR_PT_MANAGED_TRANSPORT_VER": "1",
           "TOR_PT_CLIENT_TRANSPORTS": methods, "TOR_PT_STATE_LOCATION": str(state),
           "TOR_PT_EXIT_ON_STDIN_CLOSE": "1"}
    proc = subprocess.Popen([str(ptlab), "pt"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=state.parent)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        while line := proc.stdout.readline():
            lines.append(line.strip())
            if lines[-1] == "CMETHODS DONE":
                break
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0, proc.stderr.read()[-2000:]
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines
