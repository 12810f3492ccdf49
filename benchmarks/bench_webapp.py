"""The web app's weight and first paint: the bytes of its JavaScript and CSS, and how soon ``/`` paints.

1. Sizes: every file the page loads (``index.html``, ``app.js``, ``app.css``, ``icon.svg``) as
   shipped in the package, raw and gzipped (level 6, as a proxy would send them). The target is
   JavaScript + CSS under 300 KB.
2. First paint: ``bunko serve`` on a free loopback port (a fresh BUNKO_HOME; the embedded store),
   then Debian's Chromium (headless, driven by Playwright, never downloaded) opens ``/`` in a fresh
   browser context ``--runs`` times; each run reads the page's own ``first-paint`` and
   ``first-contentful-paint`` entries (Paint Timing API, milliseconds since navigation start) and
   ``domContentLoaded``, and ``ready``: when the app's script has put the sign-in screen in the
   reader's language and shown it (its ``bunko:ready`` mark; until then only the header shows).
   The target is first paint under 1 s. Each context has an empty cache, so every run loads every
   file.

Usage::

    python benchmarks/bench_webapp.py [--runs 10] [--chromium /usr/bin/chromium] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "src" / "bunko" / "server" / "static"
FILES = ["index.html", "app.js", "app.css", "icon.svg"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def sizes() -> dict[str, Any]:
    """Raw and gzipped bytes of each file, and the JavaScript + CSS total."""
    files = {}
    for name in FILES:
        data = (STATIC / name).read_bytes()
        files[name] = {"bytes": len(data), "gzip_bytes": len(gzip.compress(data, 6))}
    js_css = sum(files[n]["bytes"] for n in ("app.js", "app.css"))
    js_css_gz = sum(files[n]["gzip_bytes"] for n in ("app.js", "app.css"))
    return {"files": files, "js_css_bytes": js_css, "js_css_gzip_bytes": js_css_gz}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_paint(chromium: str, runs: int) -> dict[str, Any]:
    """Start a server, open ``/`` ``runs`` times in fresh contexts, return the paint timings."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as home:
        port = _free_port()
        env = {**os.environ, "BUNKO_HOME": home, "BUNKO_RATE_LIMIT": "0",
               "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        server = subprocess.Popen([sys.executable, "-m", "bunko", "serve", "--port", str(port), "--log-level",
                                   "warning"], env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/"
        try:
            while True:
                try:
                    if httpx.get(url + "readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None:
                    raise SystemExit("bunko serve did not start")
                time.sleep(0.3)
            samples: list[dict[str, float]] = []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
                for _ in range(runs):
                    context = browser.new_context(viewport={"width": 1280, "height": 860})
                    page = context.new_page()
                    page.goto(url, wait_until="load")
                    page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0"
                                           " && performance.getEntriesByName('bunko:ready').length > 0")
                    samples.append(page.evaluate("""() => {
                        const paint = Object.fromEntries(performance.getEntriesByType('paint')
                            .map((e) => [e.name, e.startTime]));
                        const nav = performance.getEntriesByType('navigation')[0];
                        return {first_paint: paint['first-paint'],
                                first_contentful_paint: paint['first-contentful-paint'],
                                dom_content_loaded: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
                                ready: performance.getEntriesByName('bunko:ready')[0].startTime,
                                transferred: performance.getEntriesByType('resource')
                                    .reduce((s, e) => s + e.transferSize, nav.transferSize)};
                    }"""))
                    context.close()
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    summary: dict[str, Any] = {"runs": runs}
    for name in ("first_paint", "first_contentful_paint", "ready", "dom_content_loaded", "load"):
        values = sorted(s[name] for s in samples)
        summary[name + "_ms"] = {"median": round(statistics.median(values), 1), "max": round(values[-1], 1)}
    summary["transferred_bytes"] = int(statistics.median(s["transferred"] for s in samples))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--chromium", default=os.environ.get("BUNKO_CHROMIUM") or shutil.which("chromium")
                        or "/usr/bin/chromium")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    args = parser.parse_args()
    result: dict[str, Any] = {"sizes": sizes(), "load_average": os.getloadavg()[0]}
    if Path(args.chromium).is_file():
        result["paint"] = first_paint(args.chromium, args.runs)
    else:
        result["paint"] = None
        print(f"no Chromium at {args.chromium}: first paint not measured", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    s = result["sizes"]
    for name, f in s["files"].items():
        print(f"{name:<12} {f['bytes']:>8,} B  gzip {f['gzip_bytes']:>7,} B")
    print(f"JavaScript + CSS: {s['js_css_bytes']:,} B (gzip {s['js_css_gzip_bytes']:,} B); target < 300 KB")
    if result["paint"]:
        p = result["paint"]
        print(f"first paint of / over loopback, {p['runs']} fresh contexts "
              f"(load average {result['load_average']:.1f}):")
        for name in ("first_paint", "first_contentful_paint", "ready", "dom_content_loaded", "load"):
            print(f"  {name:<24} median {p[name + '_ms']['median']:>7.1f} ms   max {p[name + '_ms']['max']:>7.1f} ms")
        print(f"  transferred per load: {p['transferred_bytes']:,} B; target first paint < 1000 ms")


if __name__ == "__main__":
    main()
