"""Link shaping on a real lab: rate (tbf), loss (nft numgen) and delay (netem or the
userspace delay line), each measured from the client namespace."""

from __future__ import annotations

import re

import pytest

from netns import shaping
from netns.lab import Lab
from netns.measure import tcp_download_mbps
from netns.topology import default_topology
from ptcommon.events import count_events

pytestmark = pytest.mark.lab


@pytest.fixture
def lab():
    with Lab(default_topology(0)) as lab:
        yield lab


def shape_core(lab: Lab, shape: shaping.Shape) -> None:
    for a, b in (("censor", "inet"), ("inet", "censor")):
        shaping.apply_egress(lab.ns(a), lab.iface(a, b), shape)


def download_mbps(lab: Lab, nbytes: int) -> float:
    return tcp_download_mbps(lab.ns("web"), lab.addr("web"), lab.ns("client"), nbytes)


def ping(lab: Lab, count: int, interval: float) -> tuple[float, float]:
    """(loss %, average RTT ms) for pings from the client to the web node."""
    out = lab.exec("client", ["ping", "-n", "-q", "-c", str(count), "-i", str(interval),
                              "-W", "1", lab.addr("web")], check=False, timeout=60).stdout
    loss = float(re.search(r"([\d.]+)% packet loss", out).group(1))
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    return loss, float(m.group(1)) if m else float("nan")


def test_rate_limit_holds(lab):
    unshaped = download_mbps(lab, 20_000_000)
    shape_core(lab, shaping.Shape(rate_mbit=20))
    shaped = download_mbps(lab, 5_000_000)
    assert 12 <= shaped <= 23, shaped
    assert unshaped > 5 * shaped


def test_loss_drops_about_the_share_asked(lab):
    shape_core(lab, shaping.Shape(loss_pct=30))
    loss, _ = ping(lab, 300, 0.005)
    # 30 % each way: a ping survives with p = 0.49; 300 pings give sd ≈ 2.9 %.
    assert 36 <= loss <= 66, loss


def test_delay_line_adds_the_delay_both_ways(lab, tmp_path):
    _, base = ping(lab, 5, 0.05)
    line = shaping.start_delay_line(lab.ns("inet"), 20, tmp_path / "dl.log",
                                    dev=lab.iface("inet", "censor"))
    try:
        _, delayed = ping(lab, 10, 0.05)
    finally:
        line.stop()
    assert base < 2
    assert 40 <= delayed <= 48, delayed  # 2 × 20 ms, plus a little
    # Server-to-server traffic does not cross the censor link: not delayed.
    out = lab.exec("bridge", ["ping", "-n", "-q", "-c", "3", "-i", "0.05", lab.addr("web")])
    assert float(re.search(r"= [\d.]+/([\d.]+)/", out.stdout).group(1)) < 2
    assert count_events(line.log_text(), "stopped")
    # Stopped, it leaves no queue behind: traffic flows again, undelayed.
    _, after = ping(lab, 3, 0.05)
    assert after < 2


def test_bad_loss_is_refused(lab):
    from netns.errors import LabError

    with pytest.raises(LabError, match="loss_pct"):
        shape_core(lab, shaping.Shape(loss_pct=150))
