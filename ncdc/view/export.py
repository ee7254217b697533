"""The drawing as a picture file, made by a headless Chromium: the page, in export mode, writes
its drawing as standalone SVG (``render_page(export=True)``); a PNG is Chromium's screenshot of
that SVG at twice its size. Chromium is ``$NCDC_CHROMIUM``, else ``chromium`` (Debian),
``chromium-browser`` or ``google-chrome`` on the PATH."""
from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ncdc.ir.errors import SpecError, UsageError

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio")
TIMEOUT_S = 120
MAX_PIXELS = 16000  # the longest side of a PNG; a larger drawing is scaled down to fit


def find_chromium() -> str:
    """The Chromium to run (see the module docstring)."""
    for name in (os.environ.get("NCDC_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome"):
        path = name and shutil.which(name)
        if path:
            return path
    raise UsageError("writing .svg or .png needs Chromium (Debian: apt-get install chromium; "
                     "or set NCDC_CHROMIUM); write .html instead")


def _chromium(args: list[str], work: Path) -> str:
    cmd = [find_chromium(), *FLAGS, f"--user-data-dir={work / 'profile'}", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        raise SpecError(f"Chromium did not finish within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise SpecError(f"cannot run Chromium: {exc.strerror}") from None
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no message"]
        raise SpecError(f"Chromium failed (exit {done.returncode}): {tail[0]}")
    return done.stdout


def page_svg(page_html: str) -> str:
    """The SVG text an export-mode page draws."""
    with tempfile.TemporaryDirectory(prefix="ncdc-view-") as tmp:
        work = Path(tmp)
        page = work / "page.html"
        page.write_text(page_html, encoding="utf-8")
        dom = _chromium(["--window-size=1600,1000", "--virtual-time-budget=20000",
                         "--dump-dom", page.as_uri()], work)
    found = re.search(r'data-svg="([A-Za-z0-9+/=]+)"', dom)
    if found is None:
        raise SpecError("Chromium drew no picture (the page failed; open the .html to see why)")
    return base64.b64decode(found.group(1)).decode("utf-8")


def svg_size(svg: str) -> tuple[int, int]:
    """The width and height an SVG document states."""
    head = svg[:2000]
    w = re.search(r'<svg[^>]*\swidth="(\d+)"', head)
    h = re.search(r'<svg[^>]*\sheight="(\d+)"', head)
    if w is None or h is None:
        raise SpecError("the drawing has no size")
    return int(w.group(1)), int(h.group(1))


def svg_png(svg: str, out: str) -> None:
    """Write ``svg`` as a PNG at twice its size (less where the result would pass
    ``MAX_PIXELS``)."""
    w, h = svg_size(svg)
    scale = max(0.1, min(2.0, MAX_PIXELS / max(w, h, 1)))
    with tempfile.TemporaryDirectory(prefix="ncdc-view-") as tmp:
        work = Path(tmp)
        pic = work / "drawing.svg"
        pic.write_text(svg, encoding="utf-8")
        shot = work / "shot.png"
        _chromium([f"--window-size={w},{h}", f"--force-device-scale-factor={scale:g}",
                   "--default-background-color=ffffffff", f"--screenshot={shot}",
                   pic.as_uri()], work)
        if not shot.exists():
            raise SpecError("Chromium wrote no screenshot")
        try:
            shutil.copyfile(shot, out)
        except OSError as exc:
            raise SpecError(f"cannot write {out}: {exc.strerror}") from None


__all__ = ["find_chromium", "page_svg", "svg_png", "svg_size"]
