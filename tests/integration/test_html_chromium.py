"""The HTML report in a real headless Chromium: it renders offline, with its tables and plots.

The report is built from realistic RunRecord data (the reference campaign's control arm: two TP ranks, a
ladder with a retained HTTP 400 and an expected max_model_len+1 rejection), rendered by
``vllmqual report``, then opened in ``/usr/bin/chromium``. The screenshot must be a real
picture (not blank), and the DOM Chromium built must hold the results tables and both SVG
plots. Chromium is required: without it this test fails and says how to install it.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from support import ROOT
from support.report_samples import blank_sanitizer, reference_control_run, with_every_gate_passed

from pytest_vllmqual.cli import main
from pytest_vllmqual.report.decision import with_decision
from pytest_vllmqual.report.public import build_public_report, write_report_atomic

CHROMIUM = os.environ.get("VLLMQUAL_CHROMIUM", "/usr/bin/chromium")
INSTALL_HINT = ("Chromium is needed for the HTML report test and was not found at "
                f"{CHROMIUM}. Install it with `apt-get update && apt-get install -y chromium` "
                "(or set VLLMQUAL_CHROMIUM to a Chromium binary).")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH, HEIGHT = 1280, 2000


def _chromium() -> str:
    """The Chromium binary, once the install `make test` starts beside the tests has ended (at once
    when none was started: scripts/beside.sh)."""
    waited = subprocess.run(["bash", str(ROOT / "scripts" / "beside.sh"), "wait", "browser"], capture_output=True,
                            text=True, timeout=900, check=False)
    if waited.returncode != 0:
        pytest.fail(f"installing chromium beside the tests failed (exit {waited.returncode}):\n"
                    f"{waited.stdout[-3000:]}\n{INSTALL_HINT}", pytrace=False)
    found = CHROMIUM if os.path.isfile(CHROMIUM) else shutil.which("chromium")
    if not found:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return found


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    return done


def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a PNG (enough to see it is not blank)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report written and rendered through the CLI, as an operator would."""
    base = tmp_path_factory.mktemp("html")
    run = with_every_gate_passed(reference_control_run(base / "private"))
    assert [r["tp_rank"] for r in run.engine["ranks"]] == [0, 1]
    assert sum(1 for r in run.ladder if not r.ok and not r.expected_rejection) == 1
    report = with_decision(build_public_report(run, sanitizer=blank_sanitizer()))
    path = write_report_atomic(report, base / "report.json")
    assert main(["report", str(path)]) == 0
    return path.with_suffix(".html")


def test_screenshot_is_a_real_rendering(rendered: Path, tmp_path: Path) -> None:
    binary = _chromium()
    shot = tmp_path / "page.png"
    _run_chromium(binary, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                  rendered.as_uri())
    data = shot.read_bytes()
    assert len(data) > 50_000, f"screenshot is only {len(data)} bytes"
    width, height, pixels = _png_pixels(data)
    assert (width, height) == (WIDTH, HEIGHT)
    assert len(set(pixels[:: max(1, len(pixels) // 200_000)])) > 32, "the screenshot is (nearly) blank"


def test_dom_has_the_tables_and_both_plots(rendered: Path, tmp_path: Path) -> None:
    binary = _chromium()
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", rendered.as_uri()).stdout
    assert '<table id="gate-results">' in dom and '<table id="measurements">' in dom
    for row in ("<td>Cold managed start</td><td>Passed health in 323.5 seconds</td>",
                "<td>Functional preflight</td><td>6/6: smoke, JSON, 20/20 tool calls",
                "<td>Minimum-rank KV allocation</td><td>15.27 GiB</td>",
                "<td>Engine-reported GPU KV tokens</td><td>283,917</td>",
                "<td>Largest actual prompt</td><td>119,503</td>"):
        assert row in dom, row
    assert '<svg id="ladder-plot"' in dom and '<g id="ladder-ttft"' in dom and '<g id="ladder-prefill"' in dom
    assert 'class="pt pt-failed"' in dom and 'class="pt pt-rejected"' in dom and 'class="pt pt-ok"' in dom
    assert '<svg id="memory-chart"' in dom
    assert '<g id="memory-rank-0"' in dom and '<g id="memory-rank-1"' in dom
    assert 'class="seg seg-weights"' in dom and 'class="seg seg-kv"' in dom and 'class="seg seg-activation"' in dom
    assert 'id="verdict">promotable<' in dom


def test_a_carried_forward_example_leads_with_its_recomputed_decision_in_the_browser(tmp_path: Path) -> None:
    """The committed unpinned tiny-gpu example, rendered by ``vllmqual report``: Chromium's DOM holds
    the recomputed decision first and the stored one after it, labelled."""
    example = ROOT / "reports" / "examples" / "gpu-tp1" / "tiny-gpu.json"
    page = tmp_path / "tiny-gpu.html"
    assert main(["report", str(example), "-o", str(page)]) == 0
    dom = _run_chromium(_chromium(), tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    assert "The decision the run wrote (stored)" in dom and 'id="stored-decision"' in dom
    first, stored = dom.index('id="decision-reasons"'), dom.index('id="stored-decision"')
    assert dom.index('id="decided-again"') < first < stored < dom.index('id="stored-decision-reasons"')
    assert "the run is not pinned: the recipe says pinned: false" in dom[first:stored]
