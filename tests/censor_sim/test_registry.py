"""Detector kinds from other packages: the example of docs/lab/extending.md §3, installed as a
plugin."""

from __future__ import annotations

import random
import re
import sys
import tomllib
from pathlib import Path

import pytest

from censor_sim import registry
from censor_sim.engine import Engine
from censor_sim.packet import ACK, PSH, SYN
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, tcp

PAGE = Path(__file__).resolve().parents[2] / "docs" / "lab" / "extending.md"


def example_blocks() -> tuple[str, str, str]:
    """The section's Python detector, its entry-point table and its profile."""
    section = PAGE.read_text().split("## 3. Adding a detector", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    tomls = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert len(code) == 1 and len(tomls) == 2, "docs/lab/extending.md lost its detector example"
    return code[0], tomls[0], tomls[1]


def install(tmp_path: Path, module: str, source: str, entry_points: str) -> None:
    """A package on sys.path with a dist-info, as pip would leave it."""
    (tmp_path / f"{module}.py").write_text(source)
    info = tmp_path / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    yield tmp_path
    registry.refresh()
    for name in [m for m in sys.modules if m.startswith("ptl_example")]:
        del sys.modules[name]


def ssh_exchange(engine: Engine, banner: bytes, port: int = 22):
    engine.handle(tcp(CLIENT, SERVER, 40022, port, SYN), True)
    engine.handle(tcp(SERVER, CLIENT, port, 40022, SYN | ACK), False)
    engine.handle(tcp(CLIENT, SERVER, 40022, port, ACK), True)
    return engine.handle(tcp(CLIENT, SERVER, 40022, port, PSH | ACK, banner), True)


def test_the_documented_example_detector_runs_as_an_installed_plugin(plugin_path):
    code, eps, profile_toml = example_blocks()
    module = "ptl_example_ssh"
    # pyproject's [project.entry-points."G"] becomes the wheel's entry_points.txt [G].
    groups = tomllib.loads(eps.replace("mypkg.ssh", module))["project"]["entry-points"]
    entry = "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps_.items())
                    for g, eps_ in groups.items())
    install(plugin_path, module, code, entry)
    assert "ssh_banner" in registry.kinds()
    prof_path = plugin_path / "ssh-block.toml"
    prof_path.write_text(profile_toml)
    profile = load_profile(str(prof_path))
    engine = Engine(profile, clock=Clock(), rng=random.Random(0))
    assert [type(i).__name__ for i in engine.inspectors] == ["SshBannerInspector"]

    v = ssh_exchange(engine, b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    assert v.inject and all(i.flags == "R" for i in v.inject)
    det = [e for e in engine.effects.events if e["event"] == "detection"]
    assert det[0]["detector"] == "ssh"
    assert det[0]["evidence"] == {"version": "2.0", "software": "OpenSSH_9.2p1 Debian-2"}

    # Not SSH, or not port 22 (the profile's scope): no detection.
    other = Engine(profile, clock=Clock(), rng=random.Random(0))
    assert not ssh_exchange(other, b"GET / HTTP/1.1\r\n\r\n").inject
    assert not ssh_exchange(other, b"SSH-2.0-x\r\n", port=2222).inject
    assert not [e for e in other.effects.events if e["event"] == "detection"]


def test_a_plugin_cannot_take_a_builtin_kind(plugin_path):
    install(plugin_path, "ptl_example_fake", "class Fake:\n    def inspect(self): pass\n",
            "[ptlab.detectors]\nfet = ptl_example_fake:Fake\n")
    assert registry.detector_class("fet", "detectors.x") is registry.BUILTIN["fet"]


def test_a_broken_or_wrong_plugin_is_one_clear_error(plugin_path):
    install(plugin_path, "ptl_example_broken", "import no_such_module_here\n",
            "[ptlab.detectors]\nbroken = ptl_example_broken:X\nnotone = builtins:len\n")
    with pytest.raises(ValueError, match=r"detectors\.b: detector kind 'broken' .*"
                                         r"failed to load: ModuleNotFoundError"):
        registry.make("b", {"kind": "broken"})
    with pytest.raises(ValueError, match=r"detectors\.n: builtins:len is not a detector"):
        registry.make("n", {"kind": "notone"})


def test_an_unknown_kind_names_its_table_and_the_closest_kind():
    with pytest.raises(ValueError, match=r"detectors\.x: unknown detector kind 'fett' "
                                         r"\(did you mean 'fet'\?\)"):
        registry.make("x", {"kind": "fett"})


def test_a_packet_censor_cannot_share_a_profile_with_inspectors(tmp_path):
    prof = tmp_path / "mixed.toml"
    prof.write_text('name = "mixed"\nsource = "test"\n'
                    '[detectors.geneva]\nkind = "geneva"\ncensor = "censor1"\n'
                    '[detectors.fet]\n')
    with pytest.raises(ValueError, match="cannot share a profile with flow inspectors"):
        Engine(load_profile(str(prof)), clock=Clock(), rng=random.Random(0))


BY_CLIENT = '''
from censor_sim.inspectors import FirstPayloadInspector, Match


class ByClient(FirstPayloadInspector):
    """Judges only one client's flows: a scope the engine cannot answer per server."""

    kind = "by_client"

    def in_scope(self, flow):
        return flow.client == "198.18.0.2" and super().in_scope(flow)

    def judge(self, first):
        return Match(self.name, {"length": len(first)})
'''


def test_a_plugin_that_scopes_by_more_than_the_server_is_asked_per_flow(plugin_path):
    """The engine answers built-in scopes once per server, port and protocol; an
    inspector with its own in_scope must still be asked for every flow."""
    install(plugin_path, "ptl_example_byclient", BY_CLIENT,
            "[ptlab.detectors]\nby_client = ptl_example_byclient:ByClient\n")
    prof = plugin_path / "by-client.toml"
    prof.write_text('name = "by-client"\nsource = "test"\n[detectors.bc]\nkind = "by_client"\n'
                    '[policy]\nrules = [{ detector = "bc", action = "none" }]\n')
    engine = Engine(load_profile(str(prof)), clock=Clock(), rng=random.Random(0))
    other_client = "198.18.0.3"
    for client, port in ((CLIENT, 40001), (other_client, 40002), (CLIENT, 40003)):
        engine.handle(tcp(client, SERVER, port, 443, SYN), True)
        engine.handle(tcp(client, SERVER, port, 443, PSH | ACK, b"x" * 10), True)
    det = [e["flow"]["client_port"] for e in engine.effects.events if e["event"] == "detection"]
    assert det == [40001, 40003]
