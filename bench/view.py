"""Benchmark: ``ncdc view`` pages measured in headless Chromium.

Prints the size of the bundled spec's page (goal: at most 3 MB) and of a three-box diagram's
(pyncd's convolution_matrix.json; goal: at most 600 kB), the time from navigation start to the
first drawn frame (goal: at most 1.5 s), and the time to open a block and see it drawn, right
after the first frame (goal: at most 200 ms): for the chain Sliding Window Layer → Single-Pass
mHC → Mixing Coefficients, for every block of the spec opened from the first screen (with the
blocks around it), and for every block opened one after another breadth first until all are
open (each opened in the largest drawing it can appear in). Every figure is measured in
the browser (``performance.now()``) over several fresh page loads; min and median (and max for
"every block").

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

ROOT = Path(__file__).resolve().parents[1]
CHAIN = ("Sliding Window Layer", "Single-Pass mHC", "Mixing Coefficients")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

OPEN = """async (title) => {
  const S = window.__ncdc;
  const drawn = new Set(Array.from(document.querySelectorAll('#canvas g.node')).map(g => g.getAttribute('data-id')));
  const n = Object.values(S.scene.nodes).find(n => n.kind === 'block' && n.label === title && drawn.has(n.id));
  const t0 = performance.now();
  await S.expand(n.id);
  await new Promise(r => requestAnimationFrame(() => r()));
  return performance.now() - t0;
}"""

OPEN_ANY = """async () => {
  const S = window.__ncdc, nodes = S.scene.nodes, out = [];
  for (const id in nodes) {
    if (nodes[id].kind !== 'block' || !nodes[id].children.length) continue;
    S.expandToDepth(0);
    await new Promise(r => requestAnimationFrame(() => r()));
    const t0 = performance.now();
    await S.expand(id);  // with the blocks around it
    await new Promise(r => requestAnimationFrame(() => r()));
    out.push(performance.now() - t0);
  }
  return out;
}"""

OPEN_ALL = """async () => {
  const S = window.__ncdc, nodes = S.scene.nodes, out = [];
  const queue = [...nodes[S.scene.root].children];
  while (queue.length) {
    const id = queue.shift();
    if (nodes[id].kind !== 'block' || !nodes[id].children.length) continue;
    const t0 = performance.now();
    await S.expand(id);
    await new Promise(r => requestAnimationFrame(() => r()));
    out.push(performance.now() - t0);
    queue.push(...nodes[id].children);
  }
  return out;
}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp())
    out = tmp / "model.html"
    t0 = time.perf_counter()
    ncdc_main(["view", "-o", str(out)])
    write_s = time.perf_counter() - t0
    small = tmp / "three.html"
    ncdc_main(["view", str(ROOT / "tests/data/pyncd/convolution_matrix.json"), "-o", str(small)])
    first, opens, every, anyone = [], {t: [] for t in CHAIN}, [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=FLAGS)
        for _ in range(args.runs):
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(out.as_uri())
            first.append(page.evaluate("window.__ncdc.ready.then(s => s.firstFrameAt)"))
            for title in CHAIN:
                opens[title].append(page.evaluate(OPEN, title))
            page.close()
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(out.as_uri())
            page.evaluate("window.__ncdc.ready")
            every.extend(page.evaluate(OPEN_ALL))
            page.close()
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(out.as_uri())
            page.evaluate("window.__ncdc.ready")
            anyone.extend(page.evaluate(OPEN_ANY))
            page.close()
        browser.close()

    def fmt(xs):
        return f"min {min(xs):6.0f} ms   median {statistics.median(xs):6.0f} ms"

    print(f"page size            {out.stat().st_size / 1e6:.2f} MB (goal <= 3 MB); "
          f"written in {write_s:.2f} s")
    print(f"three-box page       {small.stat().st_size / 1e3:.0f} kB (goal <= 600 kB)")
    print(f"first drawn frame    {fmt(first)}   (goal <= 1500 ms)")
    for title in CHAIN:
        print(f"open {title:<22} {fmt(opens[title])}   (goal <= 200 ms)")
    print(f"open any block       {fmt(anyone)}   max {max(anyone):6.0f} ms over {len(anyone)} "
          "openings, each from the first screen (goal <= 200 ms)")
    print(f"open every block     {fmt(every)}   max {max(every):6.0f} ms over {len(every)} "
          "openings, one after another until all are open")


if __name__ == "__main__":
    main()
