"""Regenerate the report screenshots in docs/ (report-resnet18.png, report-bert-base.png): each zoo model
compiled for 2 threads, its report written, opened in headless Chromium (Debian's /usr/bin/chromium, driven
by Playwright), the heaviest node clicked, and the graph with its kernel panel captured.

    python docs/report_screenshots.py [resnet18 bert_base] [--out docs]
"""
import argparse
import os
import sys
import time

import tessera
from tessera import zoo

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def shoot(name: str, out: str, target: str) -> None:
    from playwright.sync_api import sync_playwright

    t0 = time.perf_counter()
    graph, params = tessera.frontend.from_onnx(zoo.get_model(name))
    exe = tessera.compile(graph, params, target=target)
    html = exe.report(os.path.join(out, f"report-{name}.html"), inputs=zoo.sample_input(name))
    print(f"{name}: compiled and reported in {time.perf_counter() - t0:.0f} s: {html}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto("file://" + html)
        page.wait_for_selector("body[data-graph-drawn='1']")
        r = page.evaluate("window.tesseraReport")
        print(f"{name}: {r['boxes']} boxes, DOMContentLoaded to graph drawn {r['drawnAt'] - r['domContentLoadedAt']:.0f} ms")
        page.click("tr.hot")                 # the heaviest node: its box opens and scrolls into view
        page.wait_for_selector("#kernel-panel.open")
        page.evaluate("document.getElementById('graph').scrollIntoView()")
        page.evaluate("document.querySelector('#graph-view .box.selected').scrollIntoView({block: 'center', inline: 'center'})")
        page.evaluate("window.scrollTo(0, document.getElementById('graph').offsetTop - 40)")
        page.screenshot(path=os.path.join(out, f"report-{name.replace('_', '-')}.png"))
        browser.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet18", "bert_base"])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--target", default="c -num-threads=2")
    args = ap.parse_args(argv)
    for name in args.models:
        shoot(name, args.out, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
