"""One self-contained HTML page for a public report: tables laid out as in the reference campaign, and plots.

The page works offline: inline CSS, inline SVG generated here, no script, no external
asset. Everything from the report is escaped. Layout:

- the first screen (:mod:`.html_first_screen`): can this be promoted, what stops it, the key
  figures beside the capacity ladder's chart (``svg#ladder-plot``);
- the decision block (verdict, what the run proves and does not prove, caveats);
- "Gate | Result", the reference campaign's results table;
- "Measurement | Value", the engine facts and the largest request;
- the capacity ladder's table (its chart, TTFT and effective prefill against API-reported prompt
  tokens with failed and rejected rungs marked distinctly, is on the first screen);
- load at SLO: latency percentiles and goodput against concurrency, with the SLO lines;
- per-rank memory, stacked weights / KV / peak activation / CUDA graph
  (``svg#memory-chart``; both plots are drawn by :mod:`.html_svg`);
- with ``--vllmqual-reference``, the drift against the earlier run (``section#drift``);
- every gate, the identity checks, lifecycle, artifacts and the redaction summary.

``render_html(report, comparison=...)`` adds an A/B section, with its output equivalence
(:mod:`.html_equivalence`); see :func:`comparison_section` for the shape it expects.

The reference campaign's tables as rows of text (``result_rows``, ``measurement_rows``,
``teardown_text``, ``per_rank``) are ``report.result_tables``'s, re-exported here, where they
were first defined, for a release.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_vllmqual.gates.registry import (
    family_of,
)
from pytest_vllmqual.gates.registry import proves as gate_proves
from pytest_vllmqual.hashing import canonical_json
from pytest_vllmqual.privacy.failure_reason import first_line
from pytest_vllmqual.report.number_format import fmt_num, readable
from pytest_vllmqual.report.query import (
    decision_shown,
)

from .html_equivalence import equivalence_html
from .html_first_screen import FIRST_SCREEN_CSS, first_screen
from .html_kit import bullets as _list
from .html_kit import esc, page
from .html_kit import table as _table
from .html_load import load_html
from .html_svg import memory_svg, rung_kind
from .result_tables import measurement_rows, per_rank, result_rows, teardown_text
from .result_tables import outcome_class as _outcome_class

__all__ = ["comparison_section", "measurement_rows", "per_rank", "render_html", "result_rows", "teardown_text"]

_CSS = """
.verdict-promotable .badge,.verdict-priority-challenger .badge{background:#1a7f37}
.verdict-healthy .badge{background:#0969da}.verdict-direct-only .badge{background:#8250df}
.verdict-no-promotion .badge{background:#cf222e}
.stored .badge{background:#57606a}
.boundary{font-style:italic;color:#57606a}
svg{background:#fff;border:1px solid #d0d7de;border-radius:.4rem;margin:.4rem 0;max-width:100%;height:auto}
svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#1b1f24}
svg .axis{stroke:#57606a;stroke-width:1}svg .grid{stroke:#eaeef2;stroke-width:1}
svg .title{font-size:13px;font-weight:600}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:.8rem}
"""


# -- sections -------------------------------------------------------------------------------------


def _decision_section(report: Mapping[str, Any]) -> str:
    """The decision block. A carried-forward record that today's rules decide differently leads with
    that recomputation; the decision its run wrote follows, as written, labelled as the stored one."""
    shown = decision_shown(report)
    verdict = str(shown.first.get("verdict") or "unknown")
    if shown.stored is None:
        return (f'<section id="decision" class="decision verdict-{esc(verdict)}"><h2>Decision</h2>'
                + _decision_block(shown.first, "") + "</section>")
    return (
        f'<section id="decision" class="decision verdict-{esc(verdict)}"><h2>Decision</h2>'
        f'<p id="decided-again">Decided again by the rules of {esc(shown.rules)}: this record was carried forward '
        "from an earlier version, and those rules decide it as shown first. The decision the run wrote is kept "
        "below it, as written.</p>"
        + _decision_block(shown.first, "")
        + '<div class="stored"><h3 id="stored-decision">The decision the run wrote (stored)</h3>'
        + _decision_block(shown.stored, "stored-") + "</div></section>"
    )


def _decision_block(decision: Mapping[str, Any], prefix: str) -> str:
    """One decision's verdict, reasons, proves, does-not-prove, caveats and boundary; ``prefix`` keeps
    the element ids of a second block apart from the first's."""
    level = "h4" if prefix else "h3"
    return (
        f'<p class="verdict"><span class="badge" id="{prefix}verdict">{esc(decision.get("verdict") or "unknown")}'
        f'</span> {esc(decision.get("summary"))} <span class="meta">({esc(decision.get("scope"))})</span></p>'
        + _list(decision.get("reasons") or [], f"{prefix}decision-reasons")
        + f"<{level}>What this proves</{level}>" + _list(decision.get("proves") or [], f"{prefix}proves")
        + f"<{level}>What it does not prove</{level}>"
        + _list(decision.get("does_not_prove") or [], f"{prefix}does-not-prove")
        + f"<{level}>Caveats</{level}>" + _list(decision.get("caveats") or [], f"{prefix}caveats")
        + f'<p class="boundary">{esc(decision.get("boundary"))}</p>'
    )


def _ladder_section(report: Mapping[str, Any]) -> str:
    ladder = report.get("ladder") or []
    if not ladder:
        return '<section id="ladder"><h2>Capacity ladder</h2><p>No capacity ladder ran.</p></section>'
    rows = []
    classes = []
    for r in ladder:
        kind = rung_kind(r)
        classes.append({"failed": "fail", "rejected": "rejected"}.get(kind, ""))
        result = {"ok": "completed", "failed": "failed (retained)", "rejected": "rejected as expected"}[kind]
        rows.append((r.get("index"), r.get("target_label"), fmt_num(r.get("target")), fmt_num(r.get("prompt_tokens")),
                     fmt_num(r.get("calibration_error")), r.get("status_code"), r.get("finish_reason"),
                     fmt_num(r.get("ttft_s"), 3), fmt_num(r.get("e2e_s"), 3), fmt_num(r.get("prefill_tok_s"), 0),
                     fmt_num(r.get("decode_tok_s"), 2), r.get("post_probe_smoke"), r.get("health_after"),
                     result + (f": {first_line(r.get('error'), 160)}" if r.get("error") else "")))
    summary = report.get("ladder_summary") or {}
    return (
        '<section id="ladder"><h2>Capacity ladder</h2>'
        f'<p>{esc(summary.get("completed"))} of {esc(summary.get("rungs"))} rungs completed, '
        f'{esc(summary.get("failed"))} failed (retained), {esc(summary.get("rejected_as_expected"))} rejected as '
        "expected. Sizes are the API-reported <code>usage.prompt_tokens</code>; a target label is never evidence.</p>"
        + '<p class="meta">The chart is in the first screen, above.</p>'
        + _table("ladder-table", ["#", "Target label", "Target", "Actual prompt tokens", "Calibration error",
                                  "HTTP", "Finish", "TTFT s", "E2E s", "Prefill tok/s", "Decode tok/s",
                                  "Post-probe smoke", "Health after", "Result"],
                 rows, classes, numeric=(0, 2, 3, 4, 7, 8, 9, 10))
        + "</section>"
    )


def _engine_section(report: Mapping[str, Any]) -> str:
    engine = report.get("engine") or {}
    ranks = engine.get("ranks") or []
    rank_rows = [(r.get("rank"), r.get("process"), fmt_num(r.get("weights_gib")), fmt_num(r.get("kv_gib")),
                  fmt_num(r.get("peak_activation_gib")), fmt_num(r.get("cuda_graph_gib")),
                  fmt_num(r.get("load_seconds"), 2)) for r in ranks]
    body = _table("measurements", ["Measurement", "Value"], measurement_rows(report))
    if ranks:
        body += "<h3>Per rank</h3>" + _table(
            "rank-facts", ["Rank", "Process", "Weights GiB", "KV GiB", "Peak activation GiB", "CUDA graph GiB",
                           "Load s"], rank_rows, numeric=(0, 2, 3, 4, 5, 6))
        body += memory_svg(report)
    else:
        body += "<p>No per-rank engine facts were read from the server log.</p>"
    sources = engine.get("sources") or {}
    if sources:
        body += "<h3>Where each engine fact came from</h3>" + _table(
            "fact-sources", ["Fact", "Source"], sorted((k, v) for k, v in sources.items()))
    args = engine.get("non_default_args")
    if args:
        body += "<h3>Non-default engine args</h3>" + _table(
            "engine-args", ["Arg", "Value"],
            [(k, canonical_json(v, compact=False) if isinstance(v, (dict, list)) else v) for k, v in sorted(args.items())])
    return f'<section id="engine-facts"><h2>Measurements and engine facts</h2>{body}</section>'


def _gates_section(report: Mapping[str, Any]) -> str:
    """Every gate; a passed one says what it proves in today's words, from its measurements (a
    record carried forward keeps the sentence its run wrote, which may say more than was checked)."""
    gates = report.get("gates") or []
    rows = [(g.get("gate"), g.get("family") or family_of(str(g.get("gate"))) or "other", g.get("title"),
             g.get("outcome"), g.get("status") or "", fmt_num(g.get("duration_s"), 2),
             len(g.get("attempts") or []), g.get("retained_failures"),
             first_line((gate_proves(g) or g.get("proves") or g.get("summary")) if g.get("outcome") == "passed"
                        else g.get("reason"), 300))
            for g in gates]
    classes = [_outcome_class(g.get("outcome")) for g in gates]
    ran = {str(g.get("gate")) for g in gates}
    missing = [(row["gate"], row["family"], row["title"], row["outcome"], row.get("reason") or "")
               for row in decision_shown(report).first.get("gates") or [] if row.get("gate") not in ran]
    absent = ("" if not missing else "<h3>Registered gates that did not run</h3>" + _table(
        "gates-not-run", ["Gate", "Family", "Title", "Outcome", "Why"], missing, ["skip"] * len(missing)))
    return ('<section id="gates"><h2>All gates</h2>'
            + _table("gate-table", ["Gate", "Family", "Title", "Outcome", "Status", "Duration s", "Attempts",
                                    "Retained failures", "Proves, summary or reason"], rows, classes, numeric=(5, 6, 7))
            + absent + "</section>")


def _recipe_origin(recipe: Mapping[str, Any]) -> str:
    """Where the recipe came from: a pinned file, a file with --vllmqual-set overrides, or the server."""
    name = f'Recipe <b>{esc(recipe.get("name"))}</b>'
    if recipe.get("origin") == "discovered":
        return (f'{name}, <b>discovered</b> from the running server (/v1/models, /version, /metrics): '
                f'nothing was pinned. SHA-256 <code>{esc(recipe.get("sha256"))}</code>.')
    overrides = recipe.get("overrides") or []
    if overrides:
        return (f'{name} with overrides {", ".join(f"<code>{esc(o)}</code>" for o in overrides)}: effective '
                f'recipe SHA-256 <code>{esc(recipe.get("sha256"))}</code>, file SHA-256 '
                f'<code>{esc(recipe.get("file_sha256"))}</code>.')
    return f'{name}, file SHA-256 <code>{esc(recipe.get("sha256"))}</code>.'


def _identity_section(report: Mapping[str, Any]) -> str:
    identity = report.get("identity") or {}
    rows = [(c.get("field"), c.get("expected"), c.get("observed"),
             c.get("status") or {True: "ok", False: "MISMATCH", None: "not checkable"}.get(c.get("ok"), "?"),
             c.get("source") or "", c.get("note") or "")
            for c in identity.get("checks") or []]
    classes = ["fail" if c.get("ok") is False else ("skip" if c.get("ok") is None else "")
               for c in identity.get("checks") or []]
    hardware = report.get("hardware") or {}
    recipe = report.get("recipe") or {}
    hw_rows = [(k, hardware.get(k)) for k in ("source", "gpu_model", "gpu_count", "gpu_memory_gib", "interconnect",
                                              "driver_version") if k in hardware]
    return (f'<section id="identity"><h2>Identity and hardware</h2><p>{_recipe_origin(recipe)} '
            f'Identity: <b>{esc(identity.get("status"))}</b>.</p>'
            + _table("identity-checks", ["Field", "Expected", "Observed", "Check", "Source", "Note"], rows, classes)
            + _table("hardware", ["Hardware", "Value"], hw_rows) + "</section>")


def _lifecycle_section(report: Mapping[str, Any]) -> str:
    life = report.get("lifecycle") or {}
    rows: list[tuple[str, Any]] = [("Launcher", life.get("launcher")),
                                   ("Cold start to ready", fmt_num(life.get("cold_start_s"), 1, " s")),
                                   ("Startup status", life.get("startup_status")), ("Last phase", life.get("last_phase"))]
    teardown = life.get("teardown") or {}
    for key in ("stopped", "seconds", "surviving_processes", "surviving_process_names", "shm_leftover_files",
                "containers_left", "clean", "notes"):
        if key in teardown:
            rows.append((f"Teardown: {key.replace('_', ' ')}", readable(teardown[key], missing="n/a")))
    extra = ""
    error = life.get("startup_error") or {}
    if error:
        # The harness's account only (report/2 has no log tail; the full log is named by SHA-256).
        log = error.get("private_log") or {}
        facts = [("Cause", error.get("cause")), ("Exit code", error.get("exit_code")),
                 ("Last startup phase", error.get("last_phase")),
                 *((f"Parsed: {k.replace('_', ' ')}", v) for k, v in (error.get("details") or {}).items()
                   if k not in ("kind", "last_phase")),
                 ("Server log (private)", f"{log.get('name')} sha256 {log.get('sha256')}" if log else None)]
        extra = (f"<h3>Startup error ({esc(error.get('status'))})</h3><p>{esc(error.get('message'))}</p>"
                 + _table("startup-error", ["Startup error", "Value"], [(k, readable(v)) for k, v in facts if v is not None])
                 + (f"<p>Hint: {esc(error.get('hint'))}</p>" if error.get("hint") else ""))
    return ('<section id="lifecycle"><h2>Lifecycle</h2>' + _table("lifecycle-table", ["Lifecycle", "Value"], rows)
            + extra + "</section>")


def _artifacts_section(report: Mapping[str, Any]) -> str:
    artifacts = report.get("artifacts") or []
    rows = [(a.get("name"), fmt_num(a.get("size")), a.get("sha256")) for a in artifacts]
    redactions = report.get("redactions") or {}
    return ('<section id="artifacts"><h2>Private artifacts and redactions</h2>'
            "<p>Raw artifacts stay in the operator's private folder; they are named here by SHA-256 only. "
            "<code>vllmqual verify REPORT PRIVATE_DIR</code> re-checks every hash.</p>"
            + _table("artifact-table", ["Artifact", "Bytes", "SHA-256"], rows, numeric=(1,))
            + _table("redactions", ["Scrubbed kind", "Replacements"],
                     sorted(redactions.items()) or [("none", 0)], numeric=(1,))
            + "</section>")


def comparison_section(comparison: Mapping[str, Any]) -> str:
    """The optional A/B section, in the reference campaign's "Measurement | control | candidate | Change" style.

    Expected shape (the compare module fills it): ``{"title": str, "arms": [str, ...],
    "rows": [{"measurement": str, "values": [str, ...], "change": str}], "verdict": str,
    "notes": [str, ...]}``; a full comparison record (``ab.compare.compare_reports``) adds the
    controlled variables, the retained findings, the decision lists and the arm reports'
    SHA-256. Every field is optional and every value is escaped.
    """
    arms = [str(a) for a in comparison.get("arms") or []]
    rows = [(r.get("measurement"), *[str(v) for v in r.get("values") or []], r.get("change") or "")
            for r in comparison.get("rows") or []]
    decision = comparison.get("decision") or {}
    verdict = comparison.get("verdict") or decision.get("verdict")
    out = [f'<section id="comparison"><h2>{esc(comparison.get("title") or "A/B comparison")}</h2>'
           + (f'<p class="verdict-{esc(verdict)}">Verdict: <span class="badge" id="comparison-verdict">{esc(verdict)}'
              f'</span> {esc(decision.get("summary") or "")}</p>' if verdict else "")
           + _table("comparison-table", ["Measurement", *arms, "Change"], rows)
           + _list(comparison.get("notes") or [], "comparison-notes")]
    variables = comparison.get("controlled_variables") or {}
    if variables:
        changes = [(c.get("kind"), c.get("path"), c.get("control"), c.get("candidate"))
                   for c in variables.get("changed") or []]
        out.append(f'<h3>Controlled variables</h3><p id="controlled-summary">{esc(variables.get("summary"))}'
                   + (" <b>Confounded.</b>" if variables.get("confounded") else "") + "</p>"
                   + _table("controlled-variables", ["Kind", "Recipe key", *arms], changes,
                            ["fail" if c[0] == "functional" and variables.get("confounded") else "" for c in changes]))
    findings = comparison.get("findings") or []
    if findings:
        out.append("<h3>Retained findings</h3>" + _table(
            "comparison-findings", ["Finding", "Status", "Summary"],
            [(f.get("id"), f.get("status"), f.get("summary")) for f in findings],
            ["fail" if f.get("status") in ("flagged", "not_reproducible") else "" for f in findings]))
    equivalence = comparison.get("equivalence")
    if isinstance(equivalence, Mapping):
        out.append('<section id="equivalence"><h3>Output equivalence: does the candidate answer as the control '
                   "does?</h3>" + equivalence_html(equivalence) + "</section>")
    if decision:
        out.append("<h3>What the comparison proves</h3>" + _list(decision.get("proves") or [], "comparison-proves")
                   + "<h3>What it does not prove</h3>"
                   + _list(decision.get("does_not_prove") or [], "comparison-does-not-prove")
                   + "<h3>Caveats</h3>" + _list(decision.get("caveats") or [], "comparison-caveats"))
    refs: list[Mapping[str, Any]] = [ref for ref in (comparison.get(role) for role in ("control", "candidate", "replay"))
                                     if isinstance(ref, Mapping)]
    if refs:
        out.append(_table("comparison-reports", ["Role", "Recipe", "Run", "Report SHA-256"],
                          [(r.get("role"), r.get("recipe"), r.get("run_id"), r.get("report_sha256")) for r in refs]))
    return "".join(out) + "</section>"


def _drift_section(report: Mapping[str, Any]) -> str:
    """This run's probe against an earlier run's (``--vllmqual-reference``), when the run made that check."""
    drift = report.get("drift")
    if not isinstance(drift, Mapping):
        return ""
    ref = drift.get("reference") or {}
    return ('<section id="drift"><h2>Drift against a reference run</h2>'
            f'<p>The reference run is the control, this run the candidate: reference report '
            f'<code>{esc(ref.get("report"))}</code> (SHA-256 <code>{esc(ref.get("report_sha256"))}</code>), run '
            f'<code>{esc(ref.get("run_id"))}</code> of recipe <b>{esc(ref.get("recipe"))}</b>, started '
            f'{esc(ref.get("started_utc"))}; its probe sidecar <code>{esc(ref.get("sidecar"))}</code>. '
            f'{esc(drift.get("effect"))}</p>'
            + equivalence_html(drift, prefix="drift", names={"control": "reference run", "candidate": "this run"})
            + "</section>")


def render_html(report: Mapping[str, Any], comparison: Mapping[str, Any] | None = None) -> str:
    """The whole page for one report (plus an optional A/B section), as one offline HTML string."""
    run = report.get("run") or {}
    recipe = report.get("recipe") or {}
    tool = report.get("tool") or {}
    results = result_rows(report)
    title = f"vllmqual: {recipe.get('name')} ({run.get('arm')}) — {decision_shown(report).first.get('verdict')}"
    body = [
        f"<header><h1>Qualification report: {esc(recipe.get('name'))}</h1>",
        f'<p class="meta">arm <b>{esc(run.get("arm"))}</b> · run <code>{esc(run.get("id"))}</code> · '
        f'{esc(run.get("started_utc"))} → {esc(run.get("finished_utc"))} · status <b>{esc(run.get("status"))}</b>'
        + (f' ({esc("; ".join(run.get("status_reasons") or []))})' if run.get("status_reasons") else "")
        + f' · mode <b>{esc(run.get("mode"))}</b> · {esc(tool.get("name"))} {esc(tool.get("version"))}</p></header>',
        first_screen(report, comparison),
        _decision_section(report),
        '<section id="results"><h2>Gates and measurements</h2>'
        + _table("gate-results", ["Gate", "Result"], [(g, r) for g, r, _ in results], [c for _, _, c in results])
        + "</section>",
        _drift_section(report),
        _engine_section(report),
        _ladder_section(report),
        load_html(report),
        comparison_section(comparison) if comparison is not None else "",
        _gates_section(report),
        _identity_section(report),
        _lifecycle_section(report),
        _artifacts_section(report),
        f'<footer><p class="meta">Schema <code>{esc(report.get("schema"))}</code> · reproduce: '
        f'<code>{esc(run.get("reproduce"))}</code></p></footer>',
    ]
    return page(title, body, _CSS + FIRST_SCREEN_CSS)
