"""The fleet record as an offline HTML page (the run page's kit and look) and as one junit file.

The page: the fleet verdict with what it proves and does not, the row table (a row per job
attempt and node), the cross-node comparisons, each job's answers as a node-by-node matrix with
its floor and suspects, the nodes. The junit file has a testsuite per
job and a testcase per row; a row that did not pass is a failure (or an error for a run that
never reported), with the record's own words, never a server's; each job's cross-node comparison
is one more testcase, skipped with the reason when the job was not compared; a job whose answers
were compared has a testsuite with a testcase per node (a suspect fails).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pytest_vllmqual.report.html_kit import Markup, bullets, esc, page, table
from pytest_vllmqual.report.junit import JunitCase, JunitSuite, junit_document
from pytest_vllmqual.report.number_format import fmt_num

__all__ = ["render_fleet_html", "render_fleet_junit"]

_CSS = """
body{max-width:1280px}
.verdict-consistent .badge{background:#1a7f37}.verdict-inconsistent .badge{background:#bf8700}
.verdict-failed .badge{background:#cf222e}.verdict-incomplete .badge{background:#8250df}
.verdict-not-compared .badge{background:#57606a}
"""


def _num(value: Any, digits: int = 3) -> str:
    return "—" if value is None else fmt_num(value, digits)


def _row_cells(row: Mapping[str, Any]) -> list[Any]:
    gates = row.get("gates") or {}
    report = row.get("report") or {}
    verdict = Markup(f'<a href="{esc(report.get("html"))}">{esc(row.get("verdict"))}</a>') if report.get("html") \
        else row.get("verdict") or "—"
    outcome = Markup(f"<b>{esc(row.get('outcome'))}</b>" + (f"<br>{esc(row.get('reason'))}" if row.get("reason") else ""))
    overrides = Markup("<br>".join(f"<code>{esc(o)}</code>" for o in row.get("node_overrides") or [])) or "—"
    return [row.get("job"), row.get("attempt"), row.get("node") or "—", row.get("node_key") or "—", row.get("recipe"),
            outcome, verdict,
            f"{gates.get('passed', 0)} / {gates.get('failed', 0)} / {gates.get('not_applicable', 0)}"
            + (f" + {gates['excused_by_declaration']} excused" if gates.get("excused_by_declaration") else ""),
            _num(row.get("cold_start_s"), 1), _num(row.get("kv_cache_tokens")), _num(row.get("largest_prompt_tokens")),
            _num(row.get("largest_ttft_s")), _num(row.get("queue_s"), 1), _num(row.get("elapsed_s"), 1), overrides]


def _comparison(comparison: Mapping[str, Any]) -> str:
    items = "".join(f"<li>{esc(f['text'])}</li>" for f in comparison.get("findings") or [])
    timings = "".join(f"<li>{esc(f['text'])} (observation)</li>" for f in comparison.get("timing_observations") or [])
    return (f"<h3>job {esc(comparison.get('job'))}: {esc(', '.join(comparison.get('nodes') or []))}</h3>"
            f"<p>{esc(comparison.get('summary'))}</p>" + (f"<ul>{items}</ul>" if items else "")
            + (f"<p class=meta>timings beyond the noise floor:</p><ul>{timings}</ul>" if timings else ""))


def _cell(pair: Mapping[str, Any] | None) -> Any:
    if pair is None:
        return "—"
    if not pair.get("compared"):
        return "not compared"
    if not pair.get("differs"):
        return "alike"
    figures = pair.get("figures") or {}
    shown = ", ".join(f"{figures[k]['label']} {fmt_num(figures[k]['point'], 4)}" if k in figures else k
                      for k in pair.get("differing") or [])
    return Markup(f"<b>differs</b> ({esc(pair.get('cause'))})<br>{esc(shown)}")


def _matrix(answer: Mapping[str, Any]) -> str:
    """The node-by-node matrix of one job's answers (the diagonal: the node against itself, when measured)."""
    nodes = list(answer.get("nodes") or [])
    pairs = {tuple(p["nodes"]): p for p in answer.get("pairs") or []}
    floor = answer.get("floor") or {}
    rows = []
    for a in nodes:
        cells: list[Any] = [a]
        for b in nodes:
            if a == b:
                cells.append("floor measured" if a in (floor.get("nodes") or []) else "—")
            else:
                cells.append(_cell(pairs.get((a, b)) or pairs.get((b, a))))
        rows.append(cells)
    return table(f"answers-{answer.get('job')}", ["Node", *nodes], rows)


def _answers(answer: Mapping[str, Any]) -> str:
    floor = answer.get("floor") or {}
    floor_text = (f"floor: {', '.join(floor.get('nodes') or [])} run twice" if floor.get("status") == "measured"
                  else f"floor not measured: {floor.get('reason', '')}")
    suspects = [f"{s['node']} ({s.get('node_key')}): {s.get('reason')}" for s in answer.get("suspects") or []]
    skipped = [f"{n['node']}: {n['reason']}" for n in answer.get("not_compared") or []]
    reference = answer.get("reference") or {}
    return (f"<h3>job {esc(answer.get('job'))}: probe <code>{esc(str(answer.get('probe_sha256'))[:12])}…</code></h3>"
            f"<p>{esc(answer.get('summary'))}</p><p class=meta>{esc(floor_text)}</p>"
            + (_matrix(answer) if answer.get("nodes") else "")
            + (("<h4>Suspect nodes</h4>" + bullets(suspects, "fleet-suspects")) if suspects else "")
            + (("<h4>Not compared</h4>" + bullets(skipped, "fleet-answers-skipped")) if skipped else "")
            + (f"<h4>Against the reference {esc(reference.get('file'))}</h4><p>{esc(reference.get('summary'))}</p>"
               + bullets([p["summary"] for p in reference.get("pairs") or []], "fleet-reference") if reference else ""))


def render_fleet_html(record: Mapping[str, Any]) -> str:
    """The whole fleet page as one offline HTML string."""
    fleet = record.get("fleet") or {}
    decision = record.get("decision") or {}
    verdict = str(decision.get("verdict"))
    skipped = list(decision.get("not_compared") or [])
    rows = list(record.get("rows") or [])
    classes = ["" if r.get("outcome") == "passed" else "skip" if r.get("outcome") == "cancelled" else "fail"
               for r in rows]
    headers = ["Job", "Attempt", "Node", "Node key", "Recipe", "Outcome", "Verdict", "Gates pass / fail / n-a", "Cold start s",
               "KV pool tokens", "Largest prompt", "TTFT s", "Queue s", "Elapsed s", "Node overrides"]
    nodes = record.get("cluster", {}).get("nodes") or []
    body = [
        f"<header><h1>Fleet record: {esc(fleet.get('name'))}</h1>",
        f'<p class="meta">run <code>{esc(fleet.get("run_id"))}</code> · {esc(record.get("started_utc"))} → '
        f'{esc(record.get("finished_utc"))} · status <b>{esc(record.get("status"))}</b> · '
        f'{len(nodes)} node(s) · cluster {esc(record.get("cluster", {}).get("mode"))}</p></header>',
        f'<section class="decision verdict-{esc(verdict.replace(" ", "-"))}"><h2>Fleet verdict <span class="badge">{esc(verdict)}'
        "</span></h2><h3>What this fleet run proves</h3>" + bullets(decision.get("proves") or [], "fleet-proves")
        + "<h3>What it does not prove</h3>" + bullets(decision.get("does_not_prove") or [], "fleet-does-not-prove")
        + "</section>",
        '<section id="rows"><h2>Jobs by node</h2>' + table("fleet-rows", headers, [_row_cells(r) for r in rows],
                                                             classes) + "</section>",
        '<section id="comparisons"><h2>Cross-node comparison</h2>'
        + ("".join(_comparison(c) for c in record.get("comparisons") or [])
           or "<p>No job ran one recipe on two or more nodes.</p>")
        + "".join(f"<h3>job {esc(s.get('job'))}: not compared</h3><p>{esc(s.get('reason'))}</p>" for s in skipped)
        + "</section>",
        '<section id="answers"><h2>Answers, node by node</h2>'
        + ("".join(_answers(a) for a in record.get("answers") or [])
           or "<p>No job's answers were compared (no job ran the probe on two or more nodes).</p>")
        + "</section>",
        '<section id="nodes"><h2>Nodes</h2>' + table(
            "fleet-nodes", ["Node", "Ray node id (SHA-256, 12 hex)", "CPU cores", "GPUs"],
            [[n.get("node"), Markup(f"<code>{esc(n.get('node_id_sha256'))}</code>"), _num(n.get("cpus"), 0),
              _num(n.get("gpus"), 0)] for n in nodes]) + "</section>",
        f'<footer><p class="meta">Schema <code>{esc(record.get("schema"))}</code> · fleet file SHA-256 '
        f'<code>{esc(fleet.get("file_sha256"))}</code></p></footer>',
    ]
    return page(f"vllmqual fleet: {fleet.get('name')} — {verdict}", body, _CSS)


def _cross_node_case(job: str, record: Mapping[str, Any]) -> JunitCase:
    """The job's cross-node comparison as one more testcase: a failure when the nodes disagree,
    skipped (with the record's reason) when it was not compared."""
    case = JunitCase(f"fleet.{job}", "cross-node", time="0")
    comparison = next((c for c in record.get("comparisons") or [] if c.get("job") == job), None)
    if comparison is not None:
        return case if comparison.get("agree") else replace(case, outcome="failure",
                                                             message=str(comparison.get("summary")))
    reason = next((str(s.get("reason")) for s in (record.get("decision") or {}).get("not_compared") or []
                   if s.get("job") == job), "")
    return replace(case, outcome="skipped", message=f"not compared: {reason}".rstrip(": "))


_ROW_OUTCOMES = {"passed": None, "failed": "failure", "cancelled": "skipped"}
"""The junit element of a row's outcome; any other outcome is an error."""
_ROW_PROPERTIES = ("recipe", "verdict", "cold_start_s", "kv_cache_tokens", "largest_prompt_tokens", "largest_ttft_s")


def _row_case(job: str, row: Mapping[str, Any]) -> JunitCase:
    return JunitCase(f"fleet.{job}", f"{row.get('node') or 'no-node'}-attempt-{row['attempt']}",
                     _ROW_OUTCOMES.get(row["outcome"], "error"), f"{row['outcome']}: {row.get('reason') or ''}".rstrip(": "),
                     time=str(row.get("elapsed_s") or 0),
                     properties=tuple((key, "" if row.get(key) is None else str(row.get(key))) for key in _ROW_PROPERTIES))


def _answer_cases(answer: Mapping[str, Any]) -> list[JunitCase]:
    """A case per node of one job's answers: a failure for a named suspect or a node of an unexplained
    pair without blame, skipped for a node not compared; the reason in the record's own words."""
    job = str(answer.get("job"))
    suspects = {str(s["node"]): str(s.get("reason")) for s in answer.get("suspects") or []}
    undecided = {n for pair in answer.get("undecided") or [] for n in pair}
    pairs = answer.get("pairs") or []
    cases = []
    for node in answer.get("nodes") or []:
        case = JunitCase(f"fleet.answers.{job}", str(node), time="0")
        if node in suspects:
            case = replace(case, outcome="failure", message=suspects[node])
        elif node in undecided:
            text = next(p["summary"] for p in pairs if node in p["nodes"] and p.get("cause") == "unexplained")
            case = replace(case, outcome="failure", message=f"{text} (with two nodes neither is blamed)")
        cases.append(case)
    cases += [JunitCase(f"fleet.answers.{job}", str(n["node"]), "skipped", f"not compared: {n['reason']}", time="0")
              for n in answer.get("not_compared") or []]
    return cases


def render_fleet_junit(record: Mapping[str, Any]) -> str:
    """One junit document: a testsuite per job, a testcase per row and one for the cross-node
    comparison; and a testsuite per job whose answers were compared, a testcase per node."""
    jobs: dict[str, list[Mapping[str, Any]]] = {}
    for row in record.get("rows") or []:
        jobs.setdefault(str(row["job"]), []).append(row)
    suites = [JunitSuite(job, [*(_row_case(job, row) for row in rows), _cross_node_case(job, record)])
              for job, rows in jobs.items()]
    suites += [JunitSuite(f"answers-{a['job']}", _answer_cases(a)) for a in record.get("answers") or [] if a.get("nodes")]
    return junit_document(f"vllmqual fleet {record.get('fleet', {}).get('name')}", suites, declaration=True) + "\n"
