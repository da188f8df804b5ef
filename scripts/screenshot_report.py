"""Render an llmdoctor HTML report with headless Chromium and save a PNG, to check it displays.

    python scripts/screenshot_report.py report.html report.png [--width 1200 --height 2400]
    python scripts/screenshot_report.py --sample out.png   # a built-in report with every element

Needs a `chromium` (or chromium-browser / google-chrome) binary; the test suite never does.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    sys.exit(f"screenshot_report: no Chromium found (tried {', '.join(BROWSERS)})")


def screenshot(html: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        command = [find_browser(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--window-size={width},{height}",
                   f"--screenshot={png.resolve()}", html.resolve().as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.is_file():
        sys.exit(f"screenshot_report: chromium failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def sample_html(out: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reports import html
    from tests.reports.conftest import make_report
    with open(out, "w", encoding="utf-8") as stream:
        html.render(make_report(), stream)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", nargs="?", type=Path, help="HTML report to render")
    parser.add_argument("png", type=Path, help="PNG file to write")
    parser.add_argument("--sample", action="store_true", help="render the built-in sample report")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args()
    if args.sample:
        args.html = sample_html(args.png.with_suffix(".html"))
    elif args.html is None:
        parser.error("give an HTML file or --sample")
    screenshot(args.html, args.png, args.width, args.height)
    print(f"{args.png} ({args.png.stat().st_size} bytes) from {args.html}")


if __name__ == "__main__":
    main()
