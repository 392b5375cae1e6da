"""The fleet record as an offline HTML page (the run page's look) and as one junit file.

The page: the fleet verdict with what it proves and does not, the row table (a row per job
attempt and node), the cross-node comparisons, the nodes. The junit file has a testsuite per
job and a testcase per row; a row that did not pass is a failure (or an error for a run that
never reported), with the record's own words, never a server's; each job's cross-node comparison
is one more testcase, skipped with the reason when the job was not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from xml.etree import ElementTree as ET

__all__ = ["render_fleet_html", "render_fleet_junit"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1280px;
color:#1b1f24;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #d0d7de;
padding-bottom:.2rem}.meta{color:#57606a;font-size:.92rem}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#ffebe9}tr.skip td{background:#fff8c5}
.badge{display:inline-block;padding:.15rem .6rem;border-radius:1rem;font-weight:600;color:#fff;background:#57606a}
.verdict-consistent .badge{background:#1a7f37}.verdict-inconsistent .badge{background:#bf8700}
.verdict-failed .badge{background:#cf222e}.verdict-incomplete .badge{background:#8250df}
.verdict-not-compared .badge{background:#57606a}
.decision{border:1px solid #d0d7de;border-radius:.5rem;padding:.2rem 1.2rem 1rem;background:#fbfcfd}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85rem;word-break:break-all}
"""


def _esc(value: Any) -> str:
    return escape("" if value is None else str(value))


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return _esc(value)


def _table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence[str]], classes: Sequence[str]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join(f'<tr class="{c}">' + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row, c in zip(rows, classes, strict=False))
    return f'<div><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _row_cells(row: Mapping[str, Any]) -> list[str]:
    gates = row.get("gates") or {}
    report = row.get("report") or {}
    link = f'<a href="{_esc(report.get("html"))}">{_esc(row.get("verdict"))}</a>' if report.get("html") else \
        _esc(row.get("verdict") or "—")
    return [_esc(row.get("job")), _esc(row.get("attempt")), _esc(row.get("node") or "—"), _esc(row.get("recipe")),
            f"<b>{_esc(row.get('outcome'))}</b>" + (f"<br>{_esc(row.get('reason'))}" if row.get("reason") else ""),
            link, f"{gates.get('passed', 0)} / {gates.get('failed', 0)} / {gates.get('not_applicable', 0)}",
            _num(row.get("cold_start_s"), 1), _num(row.get("kv_cache_tokens")), _num(row.get("largest_prompt_tokens")),
            _num(row.get("largest_ttft_s")), _num(row.get("queue_s"), 1), _num(row.get("elapsed_s"), 1),
            "<br>".join(f"<code>{_esc(o)}</code>" for o in row.get("node_overrides") or []) or "—"]


def _comparison(comparison: Mapping[str, Any]) -> str:
    items = "".join(f"<li>{_esc(f['text'])}</li>" for f in comparison.get("findings") or [])
    timings = "".join(f"<li>{_esc(f['text'])} (observation)</li>" for f in comparison.get("timing_observations") or [])
    return (f"<h3>job {_esc(comparison.get('job'))}: {_esc(', '.join(comparison.get('nodes') or []))}</h3>"
            f"<p>{_esc(comparison.get('summary'))}</p>" + (f"<ul>{items}</ul>" if items else "")
            + (f"<p class=meta>timings beyond the noise floor:</p><ul>{timings}</ul>" if timings else ""))


def render_fleet_html(record: Mapping[str, Any]) -> str:
    """The whole fleet page as one offline HTML string."""
    fleet = record.get("fleet") or {}
    decision = record.get("decision") or {}
    verdict = str(decision.get("verdict"))
    skipped = list(decision.get("not_compared") or [])
    rows = list(record.get("rows") or [])
    classes = ["" if r.get("outcome") == "passed" else "skip" if r.get("outcome") == "cancelled" else "fail"
               for r in rows]
    headers = ["Job", "Attempt", "Node", "Recipe", "Outcome", "Verdict", "Gates pass / fail / n-a", "Cold start s",
               "KV pool tokens", "Largest prompt", "TTFT s", "Queue s", "Elapsed s", "Node overrides"]
    nodes = record.get("cluster", {}).get("nodes") or []
    body = [
        f"<header><h1>Fleet record: {_esc(fleet.get('name'))}</h1>",
        f'<p class="meta">run <code>{_esc(fleet.get("run_id"))}</code> · {_esc(record.get("started_utc"))} → '
        f'{_esc(record.get("finished_utc"))} · status <b>{_esc(record.get("status"))}</b> · '
        f'{len(nodes)} node(s) · cluster {_esc(record.get("cluster", {}).get("mode"))}</p></header>',
        f'<section class="decision verdict-{_esc(verdict.replace(" ", "-"))}"><h2>Fleet verdict <span class="badge">{_esc(verdict)}'
        "</span></h2><h3>What this fleet run proves</h3><ul>"
        + "".join(f"<li>{_esc(p)}</li>" for p in decision.get("proves") or []) + "</ul>"
        "<h3>What it does not prove</h3><ul>"
        + "".join(f"<li>{_esc(p)}</li>" for p in decision.get("does_not_prove") or []) + "</ul></section>",
        '<section id="rows"><h2>Jobs by node</h2>' + _table("fleet-rows", headers, [_row_cells(r) for r in rows],
                                                              classes) + "</section>",
        '<section id="comparisons"><h2>Cross-node comparison</h2>'
        + ("".join(_comparison(c) for c in record.get("comparisons") or [])
           or "<p>No job ran one recipe on two or more nodes.</p>")
        + "".join(f"<h3>job {_esc(s.get('job'))}: not compared</h3><p>{_esc(s.get('reason'))}</p>" for s in skipped)
        + "</section>",
        '<section id="nodes"><h2>Nodes</h2>' + _table(
            "fleet-nodes", ["Node", "Ray node id (SHA-256, 12 hex)", "CPU cores", "GPUs"],
            [[_esc(n.get("node")), f"<code>{_esc(n.get('node_id_sha256'))}</code>", _num(n.get("cpus"), 0),
              _num(n.get("gpus"), 0)] for n in nodes], [""] * len(nodes)) + "</section>",
        f'<footer><p class="meta">Schema <code>{_esc(record.get("schema"))}</code> · fleet file SHA-256 '
        f'<code>{_esc(fleet.get("file_sha256"))}</code></p></footer>',
    ]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>vllmqual fleet: {_esc(fleet.get('name'))} — {_esc(verdict)}</title><style>{_CSS}</style>"
            "</head><body>" + "".join(body) + "</body></html>\n")


def _cross_node_case(suite: ET.Element, job: str, record: Mapping[str, Any]) -> tuple[int, int]:
    """The job's cross-node comparison as one more testcase: a failure when the nodes disagree,
    skipped (with the record's reason) when it was not compared. Returns (failures, skipped)."""
    case = ET.SubElement(suite, "testcase", classname=f"fleet.{job}", name="cross-node", time="0")
    comparison = next((c for c in record.get("comparisons") or [] if c.get("job") == job), None)
    if comparison is not None:
        if comparison.get("agree"):
            return 0, 0
        ET.SubElement(case, "failure", message=str(comparison.get("summary")))
        return 1, 0
    reason = next((str(s.get("reason")) for s in (record.get("decision") or {}).get("not_compared") or []
                   if s.get("job") == job), "")
    ET.SubElement(case, "skipped", message=f"not compared: {reason}".rstrip(": "))
    return 0, 1


def render_fleet_junit(record: Mapping[str, Any]) -> str:
    """One junit document: a testsuite per job, a testcase per row and one for the cross-node comparison."""
    root = ET.Element("testsuites", name=f"vllmqual fleet {record.get('fleet', {}).get('name')}")
    jobs: dict[str, list[Mapping[str, Any]]] = {}
    for row in record.get("rows") or []:
        jobs.setdefault(str(row["job"]), []).append(row)
    for job, rows in jobs.items():
        failures = sum(1 for r in rows if r["outcome"] == "failed")
        errors = sum(1 for r in rows if r["outcome"] not in ("passed", "failed", "cancelled"))
        skipped = sum(1 for r in rows if r["outcome"] == "cancelled")
        suite = ET.SubElement(root, "testsuite", name=job, tests=str(len(rows) + 1))
        for row in rows:
            case = ET.SubElement(suite, "testcase", classname=f"fleet.{job}",
                                 name=f"{row.get('node') or 'no-node'}-attempt-{row['attempt']}",
                                 time=str(row.get("elapsed_s") or 0))
            props = ET.SubElement(case, "properties")
            for key in ("recipe", "verdict", "cold_start_s", "kv_cache_tokens", "largest_prompt_tokens",
                        "largest_ttft_s"):
                ET.SubElement(props, "property", name=key, value="" if row.get(key) is None else str(row.get(key)))
            message = f"{row['outcome']}: {row.get('reason') or ''}".rstrip(": ")
            if row["outcome"] == "failed":
                ET.SubElement(case, "failure", message=message)
            elif row["outcome"] == "cancelled":
                ET.SubElement(case, "skipped", message=message)
            elif row["outcome"] != "passed":
                ET.SubElement(case, "error", message=message)
        cross_failed, cross_skipped = _cross_node_case(suite, job, record)
        suite.set("failures", str(failures + cross_failed))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped + cross_skipped))
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
