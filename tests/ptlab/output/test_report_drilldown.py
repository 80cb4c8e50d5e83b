"""The report's drill-down (anchors, timelines, links), read as text and in a real
headless browser (Debian's chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ptlab.common.results import write_results
from ptlab.output.report import anchor, render_report
from tests.support.rows import blocked_row, reachable_row, results_of

CELL = "cells/obfs4__gfw-fet"


def make_run(tmp_path: Path) -> Path:
    rows = [reachable_row(censor="none", cell_dir="cells/obfs4__none", repetitions_ok=3,
                          reachability_ci95=(0.44, 1.0)),
            blocked_row(censor="gfw-fet", cell_dir=CELL, repetitions=3, repetitions_ok=0,
                        action="residual", detection_data_packet=1,
                        pcaps=["pcaps/obfs4__gfw-fet-client.pcap"],
                        benign_detail={"binary": {"ok": 0, "blocked": 1}}, benign_total=1,
                        benign_blocked=1, collateral=1.0)]
    results = results_of(rows, spec={"experiment": {"description": "drill-down test",
                                                    "repetitions": 3},
                                     "topology": {"rate_mbit": 0}},
                         provenance={"censors": {"gfw-fet": {
                             "profile": "gfw-fet-2021", "source": "Wu et al. 2023",
                             "file_sha256": "a" * 64, "effective_sha256": "b" * 64,
                             "overrides": [{"key": "policy.rules", "value": [0.9],
                                            "source_value": [0.263]}]}}})
    write_results(results, tmp_path)
    (tmp_path / CELL).mkdir(parents=True)
    (tmp_path / CELL / "obfs4-client.log").write_text(
        '{"ts": 1, "component": "x", "event": "ready"}\nclient: handshake failed: reset\n')
    (tmp_path / "cells/obfs4__none").mkdir(parents=True)
    (tmp_path / "pcaps").mkdir()
    (tmp_path / "pcaps/obfs4__gfw-fet-client.pcap").write_bytes(b"\xd4\xc3\xb2\xa1")
    events = [
        {"ts": 10.0, "component": "runner", "event": "cell_start", "cell": "obfs4__gfw-fet"},
        {"ts": 10.5, "component": "censor", "event": "detection", "cell": "obfs4__gfw-fet",
         "detector": "fet", "actions": ["residual"], "role": "transport", "data_packet": 1},
        {"ts": 10.6, "component": "censor", "event": "detection", "cell": "obfs4__gfw-fet",
         "detector": "fet", "actions": ["residual"], "role": "benign:binary"},
        {"ts": 11.0, "component": "runner", "event": "cell_end", "cell": "obfs4__gfw-fet"},
    ]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    render_report(tmp_path)
    return tmp_path / "report.html"


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.timeline_items = 0
        self._in_timeline = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "ol" and a.get("class") == "timeline":
            self._in_timeline = True
        if tag == "li" and self._in_timeline:
            self.timeline_items += 1

    def handle_endtag(self, tag):
        if tag == "ol":
            self._in_timeline = False


def check_dom(html: str, directory: Path) -> _Dom:
    dom = _Dom()
    dom.feed(html)
    for cell in ("obfs4--none", "obfs4--gfw-fet"):
        assert f"cell-{cell}" in dom.ids
    # Every in-page link has its anchor, every file link its file.
    for href in dom.hrefs:
        if href.startswith("#"):
            assert href[1:] in dom.ids, href
        else:
            assert (directory / href).exists(), href
    assert f"{CELL}/obfs4-client.log" in dom.hrefs
    assert "pcaps/obfs4__gfw-fet-client.pcap" in dom.hrefs
    assert dom.timeline_items == 3  # start, the transport's detection, end (not the benign one)
    return dom


def test_drilldown_as_text(tmp_path: Path):
    report = make_run(tmp_path)
    html = report.read_text()
    check_dom(html, tmp_path)
    assert anchor(blocked_row(censor="gfw-fet")) == "cell-obfs4--gfw-fet"
    assert "blocked 0/3, by fet at the first data packet (residual)" in html
    assert "client: handshake failed: reset" in html  # the log line that matters
    assert "0.263" in html and "Wu et al. 2023" in html  # the override and its source
    assert "unshaped" in html


def test_a_long_event_is_shown_whole_and_folded(tmp_path: Path):
    report = make_run(tmp_path)
    # A counters-heavy probe verdict: far past one line, with a long string field.
    long_event = {"ts": 10.7, "component": "censor", "event": "probe_verdict",
                  "cell": "obfs4__gfw-fet", "role": "probe", "verdict": "obfs4-like",
                  "responses": {f"probe{i}": {"bytes": 1000 + i, "closed_after_s": i / 10}
                                for i in range(12)},
                  "note": "x" * 300 + " the end"}
    with (tmp_path / "events.jsonl").open("a") as f:
        f.write(json.dumps(long_event) + "\n")
    render_report(tmp_path)
    html = report.read_text()
    folded = re.findall(r"<details><summary><code>(.*?)</code>.*?</summary><pre>(.*?)</pre>"
                        r"</details>", html, re.S)
    assert len(folded) == 1
    head, body = (unescape(x) for x in folded[0])
    shown = json.loads(body)
    assert shown == {k: v for k, v in long_event.items()
                     if k not in ("ts", "component", "event", "cell")}
    # The summary: the first whole fields (never one cut in two), then an ellipsis.
    assert head.endswith(", …}") and len(head) < 200
    first = json.loads(head.removesuffix(", …}") + "}")
    assert first and first.items() <= shown.items()
    # Short events stay on their line.
    short = '{"detector": "fet", "actions": ["residual"], "role": "transport", "data_packet": 1}'
    assert f"<code>{escape(short)}</code>" in html


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup "
                                              "installs it)")
def test_report_in_a_headless_browser(tmp_path: Path):
    report = make_run(tmp_path)
    base = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", report.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = check_dom(dom.stdout, tmp_path)
    assert "fig-goodput" in parsed.ids and re.search(r"<svg[^>]*>", dom.stdout)
    shot = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1280,2400",
                    report.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
