"""The ``vllmqual`` console script: render, verify and list, without pytest.

Subcommands:

- ``vllmqual report REPORT.json [-o OUT.html]``: one self-contained HTML page.
- ``vllmqual verify REPORT.json PRIVATE_DIR``: re-check every artifact hash (exit 1 on a
  mismatch, with the problems listed).
- ``vllmqual recipes [--dir DIR]``: the recipes there, with launcher and max_model_len.
- ``vllmqual compare A.json B.json [--replay A2.json] [-o comparison.json] [--html OUT.html]``:
  the A/B comparison (``ab.compare`` and the ``ab`` modules beside it), written atomically and printed as a markdown table;
  exit 1 when its verdict is no-promotion; an equivalence not measured is said last, exit 0
  (``--strict``: exit 1), the rule of :mod:`pytest_vllmqual.not_measured`.
- ``vllmqual recipe from-command -- CMD ...`` / ``vllmqual recipe show NAME|PATH``: a recipe
  from a ``vllm serve`` or ``docker run`` line, and the exact command a recipe runs.
- ``vllmqual fleet run FLEET.yaml [--address HOST:PORT] [-o DIR]``: the fleet file's jobs on a Ray
  cluster (a local one without ``--address``), a fleet record with the cross-node comparison.

Every operator error (missing file, invalid JSON, a report that fails its schema) prints
one line on stderr and exits 2; no traceback. A new subcommand registers itself with
:func:`register_command` (``compare`` is added that way).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_vllmqual import __version__
from pytest_vllmqual.errors import RecipeError, VllmQualError

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "build_parser", "main", "register_command"]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], None]
_COMMANDS: dict[str, tuple[str, Configure, Handler]] = {}


def register_command(name: str, help_text: str, configure: Configure, handler: Handler) -> None:
    """Add a subcommand: ``configure`` adds its arguments, ``handler`` returns the exit code."""
    _COMMANDS[name] = (help_text, configure, handler)


# -- report -------------------------------------------------------------------------------


def _configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", type=Path, metavar="REPORT.json", help="a report written by a run")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT.html", default=None,
                        help="where to write the page (default: next to the report, .html)")


def _run_report(args: argparse.Namespace) -> int:
    from pytest_vllmqual.atomic_io import write_text_atomic
    from pytest_vllmqual.report.html_page import render_html
    from pytest_vllmqual.report.on_disk import load_report

    report = load_report(args.report)
    output: Path = args.output or args.report.with_suffix(".html")
    write_text_atomic(render_html(report), output, what="HTML report")
    print(f"wrote {output}")
    return EXIT_OK


# -- verify -------------------------------------------------------------------------------


def _configure_verify(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", type=Path, metavar="REPORT.json")
    parser.add_argument("private_dir", type=Path, metavar="PRIVATE_DIR",
                        help="the run's private artifact folder")


def _run_verify(args: argparse.Namespace) -> int:
    from pytest_vllmqual.report.on_disk import load_report, verify_report

    problems = verify_report(args.report, args.private_dir)
    if problems:
        print(f"{len(problems)} problem(s) in {args.report} against {args.private_dir}:")
        for problem in problems:
            print(f"  {problem}")
        return EXIT_PROBLEMS
    count = len(load_report(args.report).get("artifacts") or [])
    print(f"ok: {count} artifact(s) match their SHA-256 in {args.report}")
    return EXIT_OK


# -- recipes ------------------------------------------------------------------------------


def _configure_recipes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, metavar="DIR", default=None, dest="directory",
                        help="recipe folder (default: fixtures/recipes under the current directory)")


def _run_recipes(args: argparse.Namespace) -> int:
    from pytest_vllmqual.recipe.loader import available_recipes, load_recipe, recipes_dir

    directory: Path = args.directory or recipes_dir(Path.cwd())
    if not directory.is_dir():
        raise VllmQualError(f"recipe folder {directory} does not exist. Fix: pass --dir DIR.")
    names = available_recipes(directory)
    if not names:
        print(f"no recipes in {directory}")
        return EXIT_OK
    rows: list[tuple[str, str, str]] = []
    invalid = 0
    for name in names:
        path = next(directory / f"{name}{s}" for s in (".yaml", ".yml") if (directory / f"{name}{s}").is_file())
        try:
            recipe = load_recipe(path)
        except RecipeError as exc:
            invalid += 1
            rows.append((name, "INVALID", str(exc).splitlines()[0]))
            continue
        rows.append((name, recipe.launcher.kind, f"{recipe.serve.max_model_len:,}"))
    width = max(len(r[0]) for r in rows)
    print(f"{'recipe'.ljust(width)}  launcher    max_model_len")
    for name, launcher, length in rows:
        print(f"{name.ljust(width)}  {launcher.ljust(10)}  {length}")
    return EXIT_PROBLEMS if invalid else EXIT_OK


# -- compare ------------------------------------------------------------------------------


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("control", type=Path, metavar="A.json", help="the control arm's report")
    parser.add_argument("candidate", type=Path, metavar="B.json", help="the candidate arm's report")
    parser.add_argument("--replay", type=Path, metavar="A2.json", default=None,
                        help="a fresh run of the control (bracketed: after the candidate)")
    parser.add_argument("-o", "--output", type=Path, metavar="comparison.json", default=None,
                        help="where to write the comparison (default: comparison.json next to B.json)")
    parser.add_argument("--html", type=Path, metavar="OUT.html", default=None,
                        help="also write the candidate's HTML page with the comparison section")
    parser.add_argument("--target-prompt", type=int, metavar="TOKENS", default=None,
                        help="'does not prove' a request above this many prompt tokens (default: the recipes' "
                             "min_largest_prompt, else 300,000)")
    parser.add_argument("--target-context", type=int, metavar="TOKENS", default=None,
                        help="'does not prove' startup at this context (default: the recipes' min_kv_tokens, "
                             "else 393,216)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when the equivalence could not be decided (not measurable or inconclusive) "
                             "and the verdict is not no-promotion; by default that is said last and the exit is 0")


def _run_compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from pytest_vllmqual.ab.compare import (
        compare_files,
        load_arm_report,
        render_markdown,
        write_comparison_atomic,
    )
    from pytest_vllmqual.ab.decision import Targets
    from pytest_vllmqual.atomic_io import write_text_atomic
    from pytest_vllmqual.report.html_page import render_html

    targets = None
    if args.target_prompt is not None or args.target_context is not None:
        paths = [args.control, args.candidate, *([args.replay] if args.replay else [])]
        targets = Targets.from_reports([load_arm_report(p) for p in paths])
        overrides = {k: v for k, v in (("prompt_tokens", args.target_prompt),
                                       ("context_tokens", args.target_context)) if v is not None}
        for key, value in overrides.items():
            if value < 1:
                raise VllmQualError(f"--target-{key.split('_')[0]} must be a positive token count, got {value}")
        targets = replace(targets, **overrides, source="command line")
    comparison = compare_files(args.control, args.candidate, replay=args.replay, targets=targets)
    output: Path = args.output or args.candidate.parent / "comparison.json"
    write_comparison_atomic(comparison, output)
    print(render_markdown(comparison), end="")
    print(f"wrote {output}")
    if args.html is not None:
        page = render_html(load_arm_report(args.candidate, "candidate"), comparison=comparison)
        write_text_atomic(page, args.html, what="HTML report")
        print(f"wrote {args.html}")
    return _compare_exit(comparison, strict=args.strict)


def _compare_exit(comparison: dict[str, object], *, strict: bool) -> int:
    """1 for a no-promotion verdict (a script must not read it as a pass); an equivalence not
    measured is said last, and exits 1 only with ``--strict``."""
    from pytest_vllmqual.equivalence import layers_lines
    from pytest_vllmqual.not_measured import equivalence_unmeasured, exit_code, summary_lines

    decision = comparison.get("decision")
    code = EXIT_OK
    if isinstance(decision, dict) and decision.get("verdict") == "no-promotion":
        print("verdict no-promotion: exit 1", file=sys.stderr)
        code = EXIT_PROBLEMS
    section = comparison.get("equivalence")
    for line in layers_lines(section if isinstance(section, dict) else {}):
        print(line, file=sys.stderr)
    found = equivalence_unmeasured("equivalence (A/B comparison)", section if isinstance(section, dict) else None)
    unmeasured = [found] if found is not None else []
    code = exit_code(code, unmeasured, strict=strict)
    for line in summary_lines(unmeasured, code=code, strict=strict, option="--strict"):
        print(line, file=sys.stderr)
    return code


# -- recipe from-command / show ------------------------------------------------------------


def _configure_recipe(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="recipe_command", metavar="ACTION", parser_class=_Parser)
    convert = sub.add_parser("from-command", help="write a recipe YAML from a `vllm serve` or `docker run` line",
                             description="Write a recipe from `vllm serve MODEL --flag ...`, `python -m "
                             "vllm.entrypoints.openai.api_server --model ...` or `docker run ... IMAGE@sha256:... "
                             "--flag ...` (after --). Known flags become recipe keys, the rest serve.extra_args, "
                             "-e values launcher.env; secrets are refused.")
    convert.add_argument("-o", "--output", type=Path, metavar="FILE.yaml", default=None,
                         help="where to write the recipe (default: ./NAME.yaml); its stem is the recipe name")
    convert.add_argument("--name", default=None, help="recipe name (default: from -o, else the served model name)")
    convert.add_argument("--runtime-version", default=None,
                         help="what GET /version of this server reports (identity.runtime_version)")
    convert.add_argument("--like", metavar="NAME|PATH", default=None,
                         help="copy description, startup, requests, gates and compare from this recipe")
    convert.add_argument("--force", action="store_true", help="overwrite an existing file")
    convert.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    show = sub.add_parser("show", help="print the exact argv or container spec a recipe runs",
                          description="Print the exact argv (subprocess) or the equivalent `docker run` line "
                          "(docker) that a run of this recipe starts.")
    show.add_argument("recipe", metavar="NAME|PATH")
    show.add_argument("--dir", type=Path, metavar="DIR", default=None, dest="directory",
                      help="recipe folder for names (default: ./fixtures/recipes, else the shipped recipes)")
    show.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                      help="apply an override first, as --vllmqual-set does (repeatable)")


def _run_recipe(args: argparse.Namespace) -> int:
    if args.recipe_command == "show":
        return _run_recipe_show(args)
    if args.recipe_command == "from-command":
        return _run_recipe_from_command(args)
    raise VllmQualError("vllmqual recipe needs an action: from-command or show. Fix: see `vllmqual recipe --help`.")


def _run_recipe_show(args: argparse.Namespace) -> int:
    import shlex

    from pytest_vllmqual.launch.command_line import command_line
    from pytest_vllmqual.launch.registry import launcher_class
    from pytest_vllmqual.recipe.loader import resolve_recipe
    from pytest_vllmqual.recipe.overrides import with_overrides
    from pytest_vllmqual.session.settings import default_recipes_dir

    recipe = with_overrides(resolve_recipe(args.recipe, args.directory or default_recipes_dir(Path.cwd())),
                            args.overrides)
    print(f"# recipe {recipe.name} ({recipe.path}, sha256 {recipe.sha256})")
    if recipe.launcher.port == 0:
        print("# --port 0 / -p HOST:0: a free port is chosen at launch")
    print("# the API key is generated per run and passed as VLLM_API_KEY in the environment, never as an argument")
    note = launcher_class(recipe.launcher.kind).command_line_note()
    if note:
        print(f"# {note}")
    print(shlex.join(command_line(recipe)))
    return EXIT_OK


def _run_recipe_from_command(args: argparse.Namespace) -> int:
    import re

    import yaml

    from pytest_vllmqual.recipe.from_command import recipe_from_command
    from pytest_vllmqual.recipe.loader import resolve_recipe, validate_raw
    from pytest_vllmqual.session.settings import default_recipes_dir

    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    name = args.name or (args.output.stem if args.output else None) or "recipe"
    from pytest_vllmqual.recipe.installed_vllm import installed_vllm

    conversion = recipe_from_command(argv, name=name, runtime_version=args.runtime_version,
                                     installed=installed_vllm())
    raw = conversion.raw
    if not args.name and not args.output:
        served = str(raw["identity"].get("served_model_name") or "recipe")
        raw["name"] = re.sub(r"[^A-Za-z0-9._-]+", "-", served.rsplit("/", 1)[-1]).strip("-.") or "recipe"
    if args.like:
        like = resolve_recipe(args.like, default_recipes_dir(Path.cwd()))
        for key in ("startup", "requests", "gates", "compare"):
            if like.raw.get(key):
                raw[key] = like.raw[key]
        raw["description"] = f"Converted from a command; settings of {like.name}."
    output: Path = args.output or Path.cwd() / f"{raw['name']}.yaml"
    if output.stem != raw["name"]:
        raise VllmQualError(f"the file name {output.name!r} must be the recipe name {raw['name']!r}.yaml. "
                            "Fix: change -o or --name.")
    validate_raw(output, raw)
    if output.exists() and not args.force:
        raise VllmQualError(f"{output} exists. Fix: pass --force to overwrite it, or another -o.")
    header = "".join(f"# note: {note}\n" for note in conversion.notes)
    text = f"# Written by `vllmqual recipe from-command`.\n{header}" + yaml.safe_dump(raw, sort_keys=False)
    from pytest_vllmqual.atomic_io import write_text_atomic

    write_text_atomic(text, output, what="recipe")
    for note in conversion.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {output}")
    return EXIT_OK


# -- fleet -------------------------------------------------------------------------------


def _configure_fleet(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="fleet_command", metavar="ACTION", parser_class=_Parser)
    run = sub.add_parser("run", help="run a fleet file's jobs on a Ray cluster and write the fleet record",
                         description="Run every job of FLEET.yaml as Ray tasks (the same pytest run a person types, "
                         "on each node) and write a fleet record (JSON, HTML, junit) with the cross-node comparison. "
                         "Needs Ray: pip install 'pytest-vllmqual[fleet]'.")
    run.add_argument("fleet", type=Path, metavar="FLEET.yaml")
    run.add_argument("--address", default=None, metavar="HOST:PORT",
                     help="an existing Ray cluster (default: start a local one on loopback and stop it afterwards)")
    run.add_argument("-o", "--output", type=Path, default=Path("reports") / "fleet", metavar="DIR",
                     help="where the record's folder goes (default: reports/fleet)")
    run.add_argument("--reference", type=Path, default=None, metavar="RECORD",
                     help="hold every node's answers against a stored fleet record (matched by node key) or one "
                     "run report, and name the node that changed since")
    run.add_argument("--nodes", default="", metavar="KEY[,KEY]",
                     help="run only on these nodes (node key, vllmqual-node label or node-N): re-test a suspect "
                     "with --reference the record that named it")
    promote = sub.add_parser("promote", help="make a fleet record the next --reference",
                             description="Copy a fleet record with its node reports and probe sidecars into DIR "
                             "(replacing the reference there), to be the next run's --reference DIR/fleet.json.")
    promote.add_argument("record", type=Path, metavar="RECORD", help="a fleet.json or its folder")
    promote.add_argument("destination", type=Path, metavar="DIR")


def _run_fleet(args: argparse.Namespace) -> int:
    from pytest_vllmqual.fleet.command import promote, run_fleet
    from pytest_vllmqual.fleet.spec import load_fleet

    if args.fleet_command == "promote":
        print(f"promoted: {promote(args.record, args.destination)}")
        return EXIT_OK
    if args.fleet_command != "run":
        raise VllmQualError("vllmqual fleet needs an action: run or promote. Fix: see `vllmqual fleet --help`.")
    load_fleet(args.fleet)  # a bad fleet file is named before anything about Ray
    nodes = [n.strip() for n in str(args.nodes).split(",") if n.strip()]
    return run_fleet(args.fleet, address=args.address, out_dir=args.output, reference=args.reference,
                     only_nodes=nodes)


register_command("report", "render a report as one self-contained HTML file", _configure_report, _run_report)
register_command("verify", "re-check a report's artifact hashes against the private folder",
                 _configure_verify, _run_verify)
register_command("recipes", "list recipes with their launcher and max_model_len", _configure_recipes, _run_recipes)
register_command("compare", "compare two arm reports (A/B), with an optional replay of the control",
                 _configure_compare, _run_compare)
register_command("recipe", "recipe tools: from-command (a recipe from a vllm serve / docker run line), show "
                 "(the exact argv or container spec)", _configure_recipe, _run_recipe)
register_command("fleet", "fleets on Ray: run (a fleet file's jobs on every matching node, then the fleet record), "
                 "promote (a record as the next reference)",
                 _configure_fleet, _run_fleet)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line (no usage dump), like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"vllmqual: error: {message} (see `vllmqual --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vllmqual", description="LLM serve qualification: reports, verification, recipes.")
    parser.add_argument("--version", action="version", version=f"vllmqual {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (help_text, configure, _handler) in _COMMANDS.items():
        configure(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vllmqual`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    _help, _configure, handler = _COMMANDS[args.command]
    try:
        return handler(args)
    except VllmQualError as exc:
        print(f"vllmqual: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"vllmqual: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
