"""The fuzz campaign's browser phase: ``ncdc view`` pages of mutated specs in headless Chromium.

Each case writes the page of a mutated spec (``bench/fuzz.py``'s mutations) with ``ncdc view``
in-process; a refusal must be one typed ``error:`` line. A written page is opened in Chromium
(``/usr/bin/chromium`` or ``$NCDC_CHROMIUM``, driven by playwright) and must become ready
(``window.__ncdc.ready``) within the time limit, draw at least one box, and raise no page
error. Counted: pages written, typed refusals, untyped exceptions, page errors, blank pages,
pages that never became ready.
"""
from __future__ import annotations

import collections
import contextlib
import io
import os
import random
import shutil
from pathlib import Path

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 10_000


def chromium() -> str | None:
    return next((p for p in (os.environ.get("NCDC_CHROMIUM"), "/usr/bin/chromium",
                             shutil.which("chromium")) if p and os.path.exists(p)), None)


def _page_text(n: int, docs: dict, specs: list) -> tuple[str, str]:
    from bench.fuzz import _text, mutate, mutate_text

    rng = random.Random(n)
    path = rng.choice(specs)
    if isinstance(docs[path], str):
        text, how = mutate_text(docs[path], rng)
        return text, f"{path.name}: {how}"
    doc, how = mutate(docs[path], rng)
    return _text(doc, rng), f"{path.name}: {how}"


def view_campaign(cases, docs: dict, specs: list, tmp: Path) -> dict:
    """Run the view cases ``cases``; the counts (and up to 5 examples of each finding)."""
    from playwright.sync_api import sync_playwright

    from ncdc.cli import main

    exe = chromium()
    if exe is None:
        raise RuntimeError("no Chromium: install it (apt-get install chromium) or set "
                           "NCDC_CHROMIUM")
    counts: collections.Counter = collections.Counter()
    examples: dict[str, list] = collections.defaultdict(list)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=FLAGS)
        try:
            for n in cases:
                text, what = _page_text(n, docs, specs)
                spec, page = tmp / "spec.json", tmp / "page.html"
                spec.write_text(text, encoding="utf-8", errors="surrogatepass")
                page.unlink(missing_ok=True)
                err = io.StringIO()
                try:
                    with contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(err):
                        rc = main(["view", str(spec), "-o", str(page)])
                except BaseException as exc:  # noqa: BLE001 - what the campaign counts
                    counts["untyped"] += 1
                    examples["untyped"].append((n, what, f"{type(exc).__name__}: {exc}"[:160]))
                    continue
                if rc != 0:
                    lines = err.getvalue().strip().splitlines()
                    ok = len(lines) == 1 and lines[0].startswith("error:")
                    counts["refused" if ok else "untyped"] += 1
                    if not ok:
                        examples["untyped"].append((n, what, err.getvalue()[-160:]))
                    continue
                counts["written"] += 1
                finding = _open(browser, page)
                if finding:
                    counts[finding[0]] += 1
                    examples[finding[0]].append((n, what, finding[1][:160]))
        finally:
            browser.close()
    return {"counts": dict(counts), "examples": {k: v[:5] for k, v in examples.items()}}


def _open(browser, page: Path) -> tuple[str, str] | None:
    """None for a page that became ready, drew a box and raised nothing; else (finding,
    detail)."""
    pg = browser.new_page(viewport={"width": 1200, "height": 800})
    problems: list[str] = []
    pg.on("pageerror", lambda e: problems.append(str(e)))
    pg.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        pg.goto(page.as_uri())
        try:
            pg.evaluate("window.__ncdc.ready")
        except Exception as exc:  # noqa: BLE001 - a page that never became ready
            return "not ready", str(exc)
        boxes = pg.evaluate("document.querySelectorAll('#canvas g.node').length")
        if problems:
            return "page error", problems[0]
        if not boxes:
            return "blank", "no box drawn"
        return None
    finally:
        pg.close()


__all__ = ["chromium", "view_campaign"]
