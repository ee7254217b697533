"""Benchmark: the ``ncdc view`` page of the whole salvaged spec, measured in headless Chromium.

Prints the page's size (goal: at most 5 MB), the time from navigation to the first drawn frame
(goal: at most 2 s), and the time to redraw after opening a block, for the chain Sliding Window
Layer → Single-Pass mHC → Mixing Coefficients (goal: at most 300 ms each), twice: opened at once
after the first frame, and opened after the page was idle for 3 s (as a person would; the page
lays out unopened blocks while idle). Every figure is measured in the browser
(``performance.now()``), over several fresh page loads, the two kinds interleaved; min and
median.

    python bench/view.py [--runs 5] [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ncdc.cli import main as ncdc_main

CHAIN = ("Sliding Window Layer", "Single-Pass mHC", "Mixing Coefficients")

OPEN = """async (title) => {
  const S = window.__ncdc;
  const drawn = new Set(Array.from(document.querySelectorAll('#canvas g.node')).map(g => g.getAttribute('data-id')));
  const n = Object.values(S.scene.nodes).find(n => n.kind === 'block' && n.label === title && drawn.has(n.id));
  const t0 = performance.now();
  await S.expand(n.id);
  await new Promise(r => requestAnimationFrame(() => r()));
  return performance.now() - t0;
}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(tempfile.mkdtemp()) / "model.html"
    t0 = time.perf_counter()
    ncdc_main(["view", "-o", str(out)])
    write_s = time.perf_counter() - t0
    size = out.stat().st_size
    first, opens, idle = [], {t: [] for t in CHAIN}, {t: [] for t in CHAIN}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        for _ in range(args.runs):
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(out.as_uri())
            page.evaluate("window.__ncdc.ready")
            # navigation start -> first frame after the first drawing
            first.append(page.evaluate(
                "performance.getEntriesByType('navigation')[0].startTime >= 0 && "
                "(window.__ncdc.stats.firstFrameMs + performance.timing.domInteractive - "
                "performance.timing.navigationStart)"))
            for title in CHAIN:
                opens[title].append(page.evaluate(OPEN, title))
            page.close()
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(out.as_uri())
            page.evaluate("window.__ncdc.ready")
            page.wait_for_timeout(3000)
            for title in CHAIN:
                idle[title].append(page.evaluate(OPEN, title))
            page.close()
        browser.close()

    def fmt(xs):
        return f"min {min(xs):7.0f} ms   median {statistics.median(xs):7.0f} ms"

    print(f"page size            {size / 1e6:.2f} MB (goal <= 5 MB); written in {write_s:.2f} s")
    print(f"first drawn frame    {fmt(first)}   (goal <= 2000 ms)")
    for title in CHAIN:
        print(f"open {title:<22} {fmt(opens[title])}   (at once; goal <= 300 ms)")
    for title in CHAIN:
        print(f"open {title:<22} {fmt(idle[title])}   (after 3 s idle; goal <= 300 ms)")


if __name__ == "__main__":
    main()
