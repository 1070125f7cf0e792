"""Command line: `python -m planner plan SPEC.json [--top N] [--format json|table] [--export FRAMEWORK [--rank N]]`,
`python -m planner validate [FILE...] [--json] [--search] [--configs F]` and `python -m planner catalog`.

Bad input exits with status 2 and the field-named messages on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from . import accuracy, jsonio, units
from .catalog import Catalog, catalog_of_rows, load_catalog
from .errors import SpecError
from .launch import FRAMEWORKS, launch_config
from .report import plan
from .spec import TOP, parse_spec, parse_top
from .validation import DEFAULT_CONFIGS, DEFAULT_RUNS, SEARCH_MAX_LAYOUTS, print_validation, validate

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command the closed pipe stopped


def main(argv: list[str] | None = None) -> int:
    try:
        status = _run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): end quietly, as `yes | head` does. Python's own flush at exit
        # would meet the closed pipe again, so standard output now points at /dev/null (Python docs, "Note on
        # SIGPIPE" in the signal module).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner", description="Plan the layout of a training job.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="search the layouts of a plan spec and print the answer")
    p.add_argument("spec", help="path to the spec JSON (see docs/plan-spec.md), or - for standard input")
    p.add_argument("--top", action=_Once, help=f"how many ranked plans to print, {TOP.lo} to {TOP.hi} (default {TOP.default})")
    p.add_argument("--format", choices=("json", "table"), default="json", help="json (default) or table")
    p.add_argument("--catalog", metavar="FILE", action=_Once,
                   help="resolve catalog names from this file, in fixture format: `manage.py catalog export FILE` "
                        "writes the web app's catalog as edited in its admin (default: the shipped fixtures/*.json)")
    p.add_argument("--export", choices=FRAMEWORKS,
                   help="print the launch configuration of one plan for this framework instead of the answer")
    p.add_argument("--rank", action=_Once, help=f"with --export: the plan ranked N, {TOP.lo} to {TOP.hi} (1 = best, as in the "
                                  "table; default 1)")
    sub.add_parser("catalog", help="list the hardware catalog and model presets by name")
    v = sub.add_parser(
        "validate", help="predict published runs with their layouts pinned; print the error per row and group",
        description="Predict every row of published_runs.json-style files with its published layout pinned and "
                    "print the error per row, per group and per GPU generation and precision (held-out rows, "
                    "planner/holdout.py, also apart). Without FILE: planner/data/published_runs.json and "
                    "planner/data/calibration_runs.json. The launch-script details of "
                    "planner/data/published_run_configs.json fill what a row of any FILE leaves null, by run id. "
                    "A few seconds for those 349 rows without --search.")
    v.add_argument("runs", nargs="*", metavar="FILE",
                   help='a published_runs.json-style file ({"cases": [...]} or a list of rows)')
    c = v.add_mutually_exclusive_group()
    c.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help="launch-script details by run id (default: planner/data/published_run_configs.json)")
    c.add_argument("--no-configs", action="store_true",
                   help="cost the rows exactly as their files state them, without launch-script details")
    v.add_argument("--json", action="store_true", help="print the whole validation as one JSON object")
    v.add_argument("--search", action="store_true",
                   help="also search each modelled row's spec with no layout pinned and report the gain the search "
                        "claims over the published layout (search_gain). Slow: 0.1-3 s a row, 1-2 minutes for "
                        "the default files on one core; identical specs are searched once and a spec with more "
                        f"than {SEARCH_MAX_LAYOUTS:,} candidate layouts is skipped (the row says so)")
    args = parser.parse_args(argv)
    try:
        if args.command == "catalog":
            print(json.dumps({k: sorted(v) for k, v in load_catalog().items()}, indent=2))
            return 0
        if args.command == "validate":
            return _validate(args)
        if args.rank is not None and args.export is None:
            raise SpecError.one("--rank", "needs --export (the framework whose configuration to print)")
        top = parse_top(args.top, "--top")
        rank = parse_top(args.rank, "--rank") if args.rank is not None else 1
        catalog = _read_catalog(args.catalog) if args.catalog else load_catalog()
        spec = parse_spec(_read_spec(args.spec), catalog)
        answer = plan(spec, top=max(top, rank))
        if args.export:
            sys.stdout.write(_export(spec, answer, args.export, rank))
            return 0
    except SpecError as exc:
        source = getattr(args, "spec", None) or " ".join(getattr(args, "runs", None) or ["files"])
        # An option's problem is not the spec file's ("invalid input spec.json: --top: ...")
        options = all(err.field.startswith("--") for err in exc.errors)
        print("error: invalid options:" if options else f"error: invalid input {source}:", file=sys.stderr)
        for err in exc.errors:
            print(f"  {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        raise  # not an internal error: `main` ends quietly
    except Exception as exc:  # noqa: BLE001 - the CLI promises no tracebacks; PLANNER_DEBUG=1 shows them
        if os.environ.get("PLANNER_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set PLANNER_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL
    if args.format == "table":
        print_table(answer, sys.stdout)
    else:
        json.dump(answer, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


class _Once(argparse.Action):
    """An option given at most once: `--top 5 --top 7` is a usage error, as `?top=5&top=7` is the API's (argparse
    would keep the last without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{option_string} is given more than once")
        setattr(namespace, self.dest, values)


def _validate(args: argparse.Namespace) -> int:
    configs = None if args.no_configs else args.configs
    result = validate(args.runs or list(DEFAULT_RUNS), search=args.search, configs=configs)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_validation(result, sys.stdout)
    return 0


def _export(spec, answer: dict[str, Any], framework: str, rank: int) -> str:
    """The launch configuration of plans[rank - 1]; a rank past the plans found is a field-named error."""
    plans = answer["plans"]
    if not plans:
        raise SpecError.one("--export", "no layout fits this spec, so there is no plan to export "
                                        "(run without --export to see the rejections)")
    if rank > len(plans):
        raise SpecError.one("--rank", f"must be between 1 and {len(plans)} (the feasible plans found), not {rank}")
    return launch_config(spec, plans[rank - 1], framework).text


def _read_spec(path: str) -> Any:
    """Read and decode the spec file as the API reads a request body (jsonio: the same size bound, encodings and
    words); I/O and JSON problems become SpecErrors naming the spec."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(jsonio.MAX_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(jsonio.MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError.one("spec", f"cannot read {path}: {exc.strerror}") from None
    if len(data) > jsonio.MAX_BYTES:
        raise SpecError.one("spec", jsonio.TOO_LARGE)
    try:
        return jsonio.loads(data)
    except ValueError as exc:
        raise SpecError.one("spec", jsonio.error_text(exc)) from None


def _read_catalog(path: str) -> Catalog:
    """A catalog file in fixture format, read as `manage.py catalog import` reads one; problems become SpecErrors
    naming --catalog."""
    try:
        with open(path, "rb") as f:
            data = jsonio.loads(f.read())
    except OSError as exc:
        raise SpecError.one("--catalog", f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError.one("--catalog", f"{path} {jsonio.error_text(exc)}") from None
    try:
        return catalog_of_rows(_rows(data), check=True)
    except ValueError as exc:  # rows not in fixture format
        raise SpecError.one("--catalog", f"{path}: {exc}") from None


def _rows(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise ValueError("must be a list of fixture rows, as `manage.py catalog export` writes")
    return data


def print_table(answer: dict[str, Any], out: TextIO) -> None:
    spec = answer["spec"]
    m, c = spec["model"], spec["cluster"]
    stack = spec["training"].get("framework", "generic")
    out.write(f"{m['name']}: {answer['model']['params'] / 1e9:.1f}B parameters, {c['num_gpus']:,} x {c['gpu']['name']}"
              f" ({c['node']['name']}, {c['fabric']['name']})"
              f"{'' if stack == 'generic' else f', training stack {stack}'}\n")
    out.write(f"searched {answer['searched']:,} layout{'' if answer['searched'] == 1 else 's'}, "
              f"{answer['feasible']:,} feasible, "
              f"in {answer['elapsed_s']:.2f} s\n\n")
    if answer["plans"]:
        out.write(f"best: {answer['plans'][0]['description']}\n")
        stated = answer.get("accuracy") or {}
        order = stated.get("ranking") or {}
        if stated:
            out.write(f"how far to trust the step time: {stated['statement']}\n")
        if answer.get("stack_accuracy"):
            out.write(f"  {answer['stack_accuracy']['statement']}\n")
        if order.get("statement"):
            out.write(f"how far to trust the order: {order['statement']}\n")
        tied = set(accuracy.ties(answer["plans"], order.get("tie_within")))
        out.write("\n")
        width = max([46] + [len(p["label"]) for p in answer["plans"]])  # labels grow with the options they name
        out.write(f"{'#':>5}  {'layout':<{width}} {'step s':>9} {'tokens/s':>13} {'MFU':>6} {'GiB':>6}  exposed time (s)\n")
        for p in answer["plans"]:
            parts = ", ".join(f"{k} {v:.3g}" for k, v in p["time_s"].items() if v > 0)
            rank = f"{'~' if p['rank'] in tied else ''}{p['rank']}"
            # Four digits, as the pages write step times: 10.100 and 0.123 had stood beside their 10.10 and 0.1234.
            step = units.significant(p["step_time_s"], 4)
            out.write(f"{rank:>5}  {p['label']:<{width}} {step:>9} {p['tokens_per_s']:>13,.0f} "
                      f"{p['mfu']:>6.1%} {p['memory_gib']['total']:>6.1f}  {parts}\n")
        if tied:
            out.write("~ within the model's measured error of the best: not reliably slower\n")
        best = answer["plans"][0]
        if best["time_to_train_s"]:
            # As the plan page writes them: "0.0 days" was 49.9 min there, "5.06e+06 GPU-hours" 5,057,890.
            tokens = spec["training"]["tokens"]
            out.write(f"\ntime to train {units.count(tokens)} token{'' if tokens == 1 else 's'}: "
                      f"{units.duration(best['time_to_train_s'])}, {units.number(best['gpu_hours'])} GPU-hours\n")
    else:
        out.write("no feasible layout\n")
    if answer["rejected"]:
        out.write("\nrejected:\n")
        for reason, count in answer["rejected"].items():
            out.write(f"  {count:>10,}  {reason}: e.g. {answer['rejected_examples'][reason]}\n")
