"""How long a report takes to load in headless chromium (the scaled report's test
and benchmarks/report_scale.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def load_ms(page: str, out: Path, timeout: float = 300.0) -> int:
    """Milliseconds to the load event of ``out/page``, in a frame timed by the page
    that holds it (chromium's own start-up is not counted)."""
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed (scripts/setup installs it)")
    timing = out / "timing.html"
    timing.write_text(
        '<!DOCTYPE html><html><head><title>pending</title><script>'
        "const t0 = performance.now();</script></head><body>"
        f'<iframe src="{page}" style="width:1280px;height:2000px" '
        "onload=\"document.title = 'loaded ' + (performance.now() - t0).toFixed(0)\">"
        "</iframe></body></html>")
    dom = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", f"--user-data-dir={out / 'profile'}",
         "--dump-dom", timing.as_uri()],
        capture_output=True, text=True, timeout=timeout)
    loaded = re.search(r"<title>loaded (\d+)</title>", dom.stdout)
    if not loaded:
        raise RuntimeError("chromium did not load the page: "
                           + dom.stdout[-500:] + dom.stderr[-500:])
    return int(loaded.group(1))
