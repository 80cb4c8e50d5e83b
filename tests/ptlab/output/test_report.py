"""The HTML report renders every cell, its plots, the RTT and the provenance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptlab.common.results import Results, write_results
from ptlab.output.report import main, render_report
from tests.support.rows import blocked_row, error_row, reachable_row, results_of, skipped_row

SHA = "0123456789abcdef0123456789abcdef01234567"


def make_results(latency: bool = True) -> Results:
    rows = [
        reachable_row(latency_ms=22.0 if latency else None, latency_ci95=None,
                      latency_samples=[20.0, 22.0, 25.0] if latency else []),
        blocked_row(censor="gfw-2015", action="rst", collateral=0.25, benign_total=4,
                    benign_blocked=1, benign_detail={"binary": {"ok": 0, "blocked": 1},
                                                     "https": {"ok": 3, "blocked": 0}}),
        error_row(transport="meek<script>", error="baseline failed: <bridge> not ready",
                  rtt_ms=20.0),
        skipped_row(),
    ]
    return results_of(rows, spec={}, provenance={
        "git_sha": SHA,
        "git_dirty": False,
        "kernel": "6.1.0-test",
        "peers": {"obfs4proxy": "obfs4proxy-0.0.14", "tor": "not installed"},
        "seeds": {"run": 7},
        "profiles": {"censor_sim/profiles/gfw.toml": "ab" * 32},
        "tools": {"sing-box": {"version": "sing-box version 1.14.4", "revision": "c005f353",
                               "tags": ["with_quic"], "sha256": "cd" * 32}},
    })


def _figures(html: str) -> list[str]:
    return re.findall(r'<figure id="fig-([a-z-]+)">', html)


def test_report_contents(tmp_path: Path) -> None:
    write_results(make_results(), tmp_path)
    out = render_report(tmp_path)
    assert out == tmp_path / "report.html"
    html = out.read_text()
    for name in ("obfs4", "gfw-2015", "reachable", "blocked", "ERROR"):
        assert name in html
    assert "RTT" in html and "20 ms" in html
    assert SHA in html and "6.1.0-test" in html and "obfs4proxy-0.0.14" in html
    assert "ab" * 32 in html and "run" in html
    assert "binary 1/1" in html  # collateral by class
    assert "42.0 [40.0, 44.0] n=3" in html  # goodput with CI and n
    assert "fet → rst" in html
    assert 'class="status status-blocked"' in html
    assert 'class="status status-skipped"' in html and "with_utls" in html
    assert "Tool sing-box" in html and "c005f353" in html and "cd" * 32 in html
    assert _figures(html) == ["status", "goodput", "latency"]
    for name in ("status", "goodput", "latency"):
        assert (tmp_path / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert "<svg" in (tmp_path / "figures" / f"{name}.svg").read_text()
        assert (tmp_path / "figures" / f"{name}.pdf").read_bytes().startswith(b"%PDF-")
        # The caption links all three, and each link leads to its file.
        for ext in ("svg", "pdf", "png"):
            assert f'<a href="figures/{name}.{ext}">{ext.upper()}</a>' in html


def test_report_escapes_text(tmp_path: Path) -> None:
    write_results(make_results(), tmp_path)
    html = render_report(tmp_path).read_text()
    assert "<script>" not in html
    assert "meek&lt;script&gt;" in html
    assert "&lt;bridge&gt; not ready" in html


def test_no_latency_plot_without_samples(tmp_path: Path) -> None:
    write_results(make_results(latency=False), tmp_path)
    html = render_report(tmp_path).read_text()
    assert _figures(html) == ["status", "goodput"]


def test_report_says_when_rtt_missing(tmp_path: Path) -> None:
    res = make_results()
    for r in res.rows:
        r.rtt_ms = None
    write_results(res, tmp_path)
    assert "RTT: not recorded" in render_report(tmp_path).read_text()


def test_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(make_results(), tmp_path)
    assert main([str(tmp_path)]) == 0
    assert (tmp_path / "report.html").exists()
    assert str(tmp_path / "report.html") in capsys.readouterr().out


def test_main_missing_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ptlab.output.report: error:") and err.count("\n") == 1


def test_dollar_names_do_not_break_plots(tmp_path: Path) -> None:
    res = make_results()
    res.rows[0].transport = r"a$\frac{$b"  # invalid mathtext if not escaped
    res.rows[0].censor = "$x"
    write_results(res, tmp_path)
    html = render_report(tmp_path).read_text()
    assert r"a$\frac{$b" in html and len(_figures(html)) == 3


@pytest.mark.parametrize(("capture", "says"), [
    ({"snaplen": 262144, "whole_packets": True}, "whole packets (snap length 262144 bytes)"),
    ({"snaplen": 256, "whole_packets": False},
     "the first 256 bytes of each packet (payloads cut)"),
    ({"snaplen": None, "whole_packets": None}, "none taken"),
    (None, "not recorded (runs before the snap length was recorded kept 256 bytes)")])
def test_report_says_what_the_captures_keep(tmp_path: Path, capture, says: str) -> None:
    results = make_results()
    if capture is not None:
        results.provenance["capture"] = capture
    write_results(results, tmp_path)
    html = render_report(tmp_path).read_text()
    assert f"<tr><th>captures</th><td><code>{says}</code></td></tr>" in html
