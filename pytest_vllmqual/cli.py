"""The ``vllmqual`` console script: render, verify and list, without pytest.

Subcommands:

- ``vllmqual report REPORT.json [-o OUT.html]``: one self-contained HTML page.
- ``vllmqual verify REPORT.json PRIVATE_DIR``: re-check every artifact hash (exit 1 on a
  mismatch, with the problems listed).
- ``vllmqual recipes [--dir DIR]``: the recipes there, with launcher and max_model_len.
- ``vllmqual compare A.json B.json [--replay A2.json] [-o comparison.json] [--html OUT.html]``:
  the A/B comparison (``compare.py``), written atomically and printed as a markdown table.

Every operator error (missing file, invalid JSON, a report that fails its schema) prints
one line on stderr and exits 2; no traceback. A new subcommand registers itself with
:func:`register_command` (``compare`` is added that way).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__
from .errors import RecipeError, VllmQualError

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
    from .evidence import load_report, write_text_atomic
    from .html import render_html

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
    from .evidence import load_report, verify_report

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
    from .recipe import available_recipes, load_recipe, recipes_dir

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


def _run_compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .compare import Targets, compare_files, load_arm_report, render_markdown, write_comparison_atomic
    from .evidence import write_text_atomic
    from .html import render_html

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
    return EXIT_OK


register_command("report", "render a report as one self-contained HTML file", _configure_report, _run_report)
register_command("verify", "re-check a report's artifact hashes against the private folder",
                 _configure_verify, _run_verify)
register_command("recipes", "list recipes with their launcher and max_model_len", _configure_recipes, _run_recipes)
register_command("compare", "compare two arm reports (A/B), with an optional replay of the control",
                 _configure_compare, _run_compare)


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
