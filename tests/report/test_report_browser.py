"""The report page in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright; no browser download) opens the file, the graph is drawn with one box per node, a click on a
box opens its kernel and shows its generated C, and a screenshot is taken. A 600-node graph draws (from
DOMContentLoaded to the graph painted) in under 2 s. Skipped, saying why, without Playwright or
Chromium (.ci/run installs Debian's chromium)."""
import os
import re

import pytest

pytest.importorskip("grandalf", reason="the report extra: pip install 'tessera[report]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright drives the browser: pip install 'tessera[dev]'")

from tessera.graph.lowering import compile_graph  # noqa: E402
from tessera.report import build_report  # noqa: E402

from report_helpers import TARGET, synthetic_graph  # noqa: E402

CHROMIUM = os.environ.get("TESSERA_CHROMIUM", "/usr/bin/chromium")
# no sandbox as root; no background networking: the page must need none, and the machine has none
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's chromium (apt-get install chromium; .ci/run does) "
                    f"or set TESSERA_CHROMIUM to a Chromium binary")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto("file://" + str(path))
    page.wait_for_selector("body[data-graph-drawn='1']", timeout=30_000)
    return page


def test_the_graph_draws_and_a_click_shows_the_kernel(browser, small_bert, tmp_path):
    exe = small_bert
    path = exe.report(tmp_path / "report.html", number=2, repeat=1)
    page = _open(browser, path)
    try:
        assert page.locator("#graph-svg g.box").count() == len(exe.graph.nodes)
        assert page.evaluate("window.tesseraReport.boxes") == len(exe.graph.nodes)
        # the heaviest node is drawn in the hottest colour; click it
        i = max(range(len(exe.plan.steps)), key=lambda j: page.evaluate(f"JSON.parse(document.getElementById("
                                                                       f"'report-data').textContent).graph.boxes[{j}].ms"))
        step = exe.plan.steps[i]
        page.click(f"#box-n{i} rect")
        page.wait_for_selector("#kernel-panel.open")
        assert step.name in page.inner_text("#kernel-panel h3")
        assert "T.prim_func" in page.inner_text("#kernel-code")                # the scheduled loop program
        page.click("#kernel-panel .tabs button[data-tab='c']")
        c = page.inner_text("#kernel-code")
        kernel = exe.compiled.kernels[step.kernel]
        assert kernel.source.functions[0].name in c and "tessera_call_" in c
        assert page.locator("#box-n%d.selected" % i).count() == 1
        assert page.locator("#memory-svg rect.tensor").count() == len(exe.memory_plan.allocations)
        # the find box: a node by name opens its box
        last = exe.plan.steps[-1]
        page.fill("#find", last.name)
        page.press("#find", "Enter")
        assert last.name in page.inner_text("#kernel-panel h3")
        assert page.locator(f"#box-n{len(exe.plan.steps) - 1}.selected").count() == 1
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        page.close()


def test_a_600_node_graph_draws_in_under_2_s(browser, tmp_path):
    compiled = compile_graph(synthetic_graph(600, "synthetic600"), TARGET, build_kernels=False)
    path = tmp_path / "r600.html"
    path.write_text(build_report(compiled, profile=False), encoding="utf-8")
    page = _open(browser, path)
    try:
        r = page.evaluate("window.tesseraReport")
        assert r["boxes"] == 600
        ms = r["drawnAt"] - r["domContentLoadedAt"]
        print(f"600-node graph: DOMContentLoaded to graph drawn {ms:.0f} ms (SVG built in {r['buildMs']:.0f} ms)")
        assert 0 <= ms < 2000, ms
        page.click("#box-n599 rect")
        page.wait_for_selector("#kernel-panel.open")
        assert re.search(r"negative|add|tanh|sigmoid|relu", page.inner_text("#kernel-code"))
    finally:
        page.close()
