"""The README says of the benchmark what docs/PERFORMANCE.md measured: every figure its Results table
marks ``FAIL`` is named in the README's Benchmarks section with its value, and the section does not
say that the harness's figures agree with vLLM's own benchmark while some of them failed."""

from __future__ import annotations

import re

from support import ROOT


def results_rows() -> list[tuple[str, str, str]]:
    """(figure, value, verdict) of each row of docs/PERFORMANCE.md's Results table."""
    text = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    table = text.split("## Results", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        value = re.search(r"\*\*([^*]+)\*\*", cells[1])
        assert value, line
        rows.append((cells[1].split(":")[0], value.group(1), cells[2]))
    return rows


def benchmarks_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_every_failed_benchmark_figure_and_claims_no_agreement_it_did_not_measure() -> None:
    failed = [(figure, value) for figure, value, verdict in results_rows() if verdict == "FAIL"]
    assert failed, "the Results table has no FAIL row: this test then checks nothing"
    section = " ".join(benchmarks_section().split())
    missing = [f"{figure}: {value}" for figure, value in failed if value not in section]
    assert missing == [], "the README's Benchmarks section leaves out failed figures"
    assert "agree with vLLM's own serving benchmark" not in section
