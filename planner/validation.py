"""Validation as a product feature: the engine's error on published runs, per row, group and hardware cohort.

`validate(paths)` predicts every row of published_runs.json-style files with its published layout pinned
(planner.published.compare does the pinning), and returns plain JSON: a summary, the same figures for the
held-out rows (planner/holdout.py: kept out of every fit, so over-fitting shows), per group, per GPU generation
and precision, every row, and the constants in use with their sources. Errors are signed and relative,
err = predicted / measured - 1 (negative: predicted too fast); the figures use |err|.

With search=True each modelled row also gets the gain the unpinned search claims over the published layout on
the same spec (search_gain = published layout's step / best unpinned step - 1). An expert's layout found 20%
slow is more likely a model error than a discovery, so this measures the ranking, not only the step time.
A second search keeps the run's own recomputation, ZeRO stage and sequence parallelism (KEPT_OPTIONS) and varies
only the parallel layout, micro-batch and virtual stages (search_gain_same_options): the gain from choices the
run's stack may not have had (selective recomputation and sequence parallelism arrived in 2022) apart from the
ranking of the parallel layouts themselves.
Identical unpinned specs are searched once, and a spec whose search would consider more than
SEARCH_MAX_LAYOUTS layouts is skipped (said in the row), so the work stays bounded.
"""
from __future__ import annotations

import ast
import copy
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, Iterable, TextIO

from . import accuracy, collectives
from . import runtext as rt
from . import constants as C
from .catalog import FIXTURES_DIR, Catalog, load_catalog
from .errors import SpecError
from .holdout import is_holdout
from .published import (Comparison, apply_overlay, checked_row, compare, load_overlays, load_rows,
                        row_to_spec_doc)
from .report import plan
from .search import estimate_layouts
from .spec import parse_spec
from .units import significant

DEFAULT_CONFIGS = accuracy.DEFAULT_CONFIGS

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_RUNS = (DATA_DIR / "published_runs.json", DATA_DIR / "calibration_runs.json")
SEARCH_MAX_LAYOUTS = 5_000_000  # the reference files' largest search: ~0.6M layouts, ~3 s
WITHIN = 0.10                   # "within 10%": |err| <= 0.10
# The layout fields the second search keeps at the published value: options of the training stack rather than of
# the placement (what the stack offered, and what the run chose to measure), not the parallel sizes.
KEPT_OPTIONS = ("recompute", "recompute_fraction", "zero", "sequence_parallel")
MAX_FILE_BYTES = 64 << 20      # a run file is read whole; the reference files together are 2 MiB
CONSTANT_LINE = re.compile(r"^[A-Z][A-Z0-9_]* = ")


def validate(paths: Iterable[Path | str] = DEFAULT_RUNS, search: bool = False,
             configs: Path | str | None = DEFAULT_CONFIGS, catalog: Catalog | None = None) -> dict[str, Any]:
    """The validation of every row in `paths` as a JSON-able dict (see the module docstring). `configs` adds the
    launch-script details its runs' rows leave null, by run id, whatever file a row comes from (None: none), so
    the reference rows give the same figures read from this package or from a copy.
    Raises SpecError naming `runs` or `configs` when a file cannot be read."""
    catalog = catalog or load_catalog()
    overlays = read_configs(configs) if configs else {}
    paths = [Path(p) for p in paths]
    rows = [(path, row) for path in paths for row in read_runs(path)]
    entries = [row_entry(row, path.name, catalog, overlays) for path, row in rows]
    if search:
        searched: dict[str, tuple[float | None, str]] = {}
        for (_, row), entry in zip(rows, entries, strict=True):
            if entry["predicted_s"] is not None:
                add_search_gain(entry, row, catalog, overlays, searched)
    by_group: dict[str, list[dict]] = {}
    by_cohort: dict[str, list[dict]] = {}
    for e in entries:
        by_group.setdefault(e["group"], []).append(e)
        by_cohort.setdefault(accuracy.cohort(e["generation"], e["precision"]), []).append(e)
    groups = {g: figures(es, search) for g, es in sorted(by_group.items())}
    return {
        "engine": {"version": C.ENGINE_VERSION, "fingerprint": accuracy.fingerprint()},
        "files": [_shown(p) for p in paths],
        "search": search,
        # The summary carries the per-group figures too, as issue #8 words it; `groups` repeats them at the top.
        "summary": {**figures(entries, search), "groups": groups},
        "holdout": figures([e for e in entries if e["holdout"]], search),
        "groups": groups,
        "by_generation_precision": {k: figures(es, search) for k, es in sorted(by_cohort.items())},
        "rows": entries,
        "constants": constants_in_use(),
    }


# ---------------------------------------------------------------------------------------------------------
# Reading the files: every problem is a SpecError naming the argument, never a traceback.


def read_runs(path: Path) -> list[dict[str, Any]]:
    rows = _read("runs", path, load_rows)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecError.one("runs", f"{path}: expected {{\"cases\": [rows]}} or a list of row objects")
    return rows


def read_configs(path: Path | str) -> dict[str, dict[str, Any]]:
    overlays = _read("configs", Path(path), load_overlays)
    if not isinstance(overlays, dict) or not all(isinstance(v, dict) for v in overlays.values()):
        raise SpecError.one("configs", f"{path}: expected {{\"runs\": {{run id: {{layout details}}}}}}")
    return overlays


def _read(field: str, path: Path, loader) -> Any:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SpecError.one(field, f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB; the reference files "
                                       "together are 2 MiB")
        return loader(path)
    except OSError as exc:
        raise SpecError.one(field, f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SpecError.one(field, f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SpecError.one(field, f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") \
            from None
    except (KeyError, TypeError, AttributeError) as exc:
        key = "runs" if field == "configs" else "cases"
        raise SpecError.one(field, f"{path}: expected an object with {key!r} ({type(exc).__name__}: {exc})") \
            from None


# ---------------------------------------------------------------------------------------------------------
# One row


def row_entry(row: dict[str, Any], file: str, catalog: Catalog,
              overlays: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One row's prediction with its published layout pinned, and what identifies it."""
    run_id = str(row.get("id")) if isinstance(row, dict) else "?"
    throughput = isinstance(row, dict) and states_throughput(row)
    try:
        row = checked_row(row)
    except SpecError as exc:
        # Reported on its row, as compare reports a row it cannot turn into a spec; of its fields only a text
        # group is read further.
        group = row.get("group") if isinstance(row, dict) and isinstance(row.get("group"), str) else None
        row, found = {"group": group}, [Comparison(run_id, float("nan"), None, "", f"no spec: {exc}")]
    else:
        try:
            found = compare([row], catalog, overlays)
        except Exception as exc:  # noqa: BLE001 - one odd row must not hide the others' results (as in compare)
            found = [Comparison(run_id, float("nan"), None, "", f"the engine failed: {type(exc).__name__}: {exc}")]
    gen = accuracy.generation(row.get("gpu_type"))
    c = found[0] if found else None
    measured = c.measured_s if c is not None and math.isfinite(c.measured_s) else None
    why = "the row states no step time or throughput" if c is None else c.why
    stated = rt.stated_peak_memory_gib(row)
    memory = c.memory_gib if c is not None else None
    return {"id": run_id, "group": str(row.get("group") or Path(file).stem), "file": file,
            "generation": gen or "other", "precision": accuracy.precision(row.get("precision"), gen),
            "gpus": row.get("gpus"), "measured_s": _r(measured),
            "predicted_s": _r(c.predicted_s) if c is not None and c.predicted_s is not None else None,
            "err": _r(c.error) if c is not None and c.error is not None and measured else None,
            "layout": c.layout if c is not None else "", "why": why, "holdout": is_holdout(run_id),
            "states_throughput": throughput,
            "memory_gib": _r(memory), "stated_memory_gib": _r(stated),
            "memory_err": _r(memory / stated - 1.0) if memory is not None and stated else None}


THROUGHPUT_KEYS = ("step_time_s", "tokens_per_sec_per_gpu", "mfu_percent", "tflops_per_gpu")


def states_throughput(row: dict[str, Any]) -> bool:
    """Whether the row publishes a step time or a throughput (what `measured` counts in the figures)."""
    return any(row.get(k) for k in THROUGHPUT_KEYS) or bool((row.get("derived") or {}).get("derived_step_time_s"))


def add_search_gain(entry: dict[str, Any], row: dict[str, Any], catalog: Catalog,
                    overlays: dict[str, dict[str, Any]], searched: dict[str, tuple[float | None, str]]) -> None:
    """search_gain = published layout's step / best unpinned step - 1, on the row's spec with no layout pins
    (Comparison.predicted_s is the published layout's step); search_gain_same_options the same with the row's
    KEPT_OPTIONS pinned. `searched` caches by spec, so duplicates are free."""
    doc = apply_overlay(row_to_spec_doc(row, catalog), overlays.get(entry["id"], {}), row)
    published = doc.pop("layout", None) or {}
    kept = {k: published[k] for k in KEPT_OPTIONS if k in published}
    for suffix, pins in (("", None), ("_same_options", kept)):
        if pins is not None:
            doc["layout"] = pins
        key = json.dumps(doc, sort_keys=True)
        if key not in searched:
            searched[key] = _best_searched(doc, catalog)
        best, label = searched[key]
        entry["search_layout" + suffix] = label
        # at predicted_s's precision (_r), so the search finding the published layout claims exactly nothing
        entry["search_gain" + suffix] = _r(entry["predicted_s"] / _r(best) - 1.0) if best else None


def _best_searched(doc: dict[str, Any], catalog: Catalog) -> tuple[float | None, str]:
    spec = parse_spec(copy.deepcopy(doc), catalog)
    size = estimate_layouts(spec)
    if size > SEARCH_MAX_LAYOUTS:
        return None, f"not searched: {size:,} layouts exceed the bound of {SEARCH_MAX_LAYOUTS:,}"
    answer = plan(spec, top=1)
    if not answer["plans"]:
        return None, "no feasible layout to search"
    return float(answer["plans"][0]["step_time_s"]), answer["plans"][0]["label"]


# ---------------------------------------------------------------------------------------------------------
# Figures


def figures(entries: list[dict[str, Any]], search: bool = False) -> dict[str, Any]:
    """rows; measured (rows that state a step time or throughput); modelled (predicted); median and max |err|;
    within_10pct (fraction of the modelled rows with |err| <= 10%); median_err (signed: < 0 means the model is
    too fast on the median); too_fast (rows predicted faster than measured); memory_rows, memory_median_abs_err and
    memory_median_err (peak memory per GPU against the rows that state it); median_search_gain and
    median_search_gain_same_options with search."""
    errs = _present(entries, "err")
    abs_errs = [abs(x) for x in errs]
    out: dict[str, Any] = {
        "rows": len(entries),
        "measured": sum(e["states_throughput"] for e in entries),
        "modelled": len(errs),
        "median_abs_err": _median(abs_errs),
        "max_abs_err": _r(max(abs_errs)) if errs else None,
        "within_10pct": _r(sum(x <= WITHIN + 1e-12 for x in abs_errs) / len(errs)) if errs else None,
        "median_err": _median(errs),
        "too_fast": sum(x < 0 for x in errs),
    }
    # Peak memory per GPU against what the rows state (most state none): memory_err = predicted / stated - 1.
    # Sources state different quantities: a reserved peak (torchtitan's log), which the prediction's fragmentation
    # allowance and runtime reserve stand for, or allocated memory (Zero Bubble's tables), which leaves them out.
    mem = _present(entries, "memory_err")
    out["memory_rows"] = len(mem)
    out["memory_median_abs_err"] = _median([abs(x) for x in mem])
    out["memory_median_err"] = _median(mem)
    if search:
        gains = _present(entries, "search_gain")
        out["searched"] = len(gains)
        out["median_search_gain"] = _median(gains)
        out["median_search_gain_same_options"] = _median(_present(entries, "search_gain_same_options"))
    return out


def _present(entries: list[dict[str, Any]], key: str) -> list[float]:
    """The entries' values of `key`, where they have one."""
    return [e[key] for e in entries if e.get(key) is not None]


def _median(values: list[float]) -> float | None:
    """Their median, rounded as every figure is; None for no values."""
    return _r(statistics.median(values)) if values else None


# ---------------------------------------------------------------------------------------------------------
# The constants in use, each with its source


def constants_in_use() -> dict[str, Any]:
    """{"engine": [{name, value, source, module}], "gpus": [{name, ..., source}]}: the model's constants with
    the comment that cites them, and the catalog GPUs' figures with their "source" field."""
    engine = [*module_constants(C), *module_constants(collectives)]
    gpus = []
    for path in sorted(FIXTURES_DIR.glob("*.json")):
        for row in json.loads(path.read_text()):
            if row.get("model") == "webui.gputype":
                gpus.append({k: v for k, v in row["fields"].items() if _json_scalar(v)})
    return {"engine": engine, "gpus": gpus}


def module_constants(module) -> list[dict[str, Any]]:
    """Upper-case module constants with literal values, each with the comment block above it (or beside it)."""
    text = Path(module.__file__).read_text()
    lines = text.splitlines()
    out, before = [], None
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.isupper()):
            continue
        value = getattr(module, node.targets[0].id, None)
        if not _json_literal(value):
            continue
        block, inline = _comment_above(lines, node.lineno - 1)
        # A block shared by a run of constants is written once, at the first (the context-parallel paragraph
        # stood word for word on eight rows of /validation/).
        shared = block and before is not None and block == before[0] and node.lineno - 1 == before[1] + 1
        first = before[2] if shared else node.targets[0].id
        source = (f"See {first}" + (f"; {inline}" if inline else ".")) if shared else \
            " ".join(part for part in (block, inline) if part)
        out.append({"name": node.targets[0].id, "module": module.__name__, "value": _plain(value), "source": source})
        before = (block, node.end_lineno - 1, first)
    return out


def _comment_above(lines: list[str], index: int) -> tuple[str, str]:
    """The comment block above a constant (shared by the constants right below it, as GEMM_TILE_M and _N), else
    the heading of its section ("# --- Latency (microseconds), NCCL defaults ---"), and its end-of-line comment."""
    inline = lines[index].split("#", 1)[1].strip() if "#" in lines[index] else ""
    block: list[str] = []
    i = index - 1
    while i >= 0 and CONSTANT_LINE.match(lines[i]):
        i -= 1
    while i >= 0 and lines[i].lstrip().startswith("#") and not lines[i].lstrip().startswith("# ---"):
        block.insert(0, lines[i].lstrip()[1:].strip())
        i -= 1
    if not block:
        heading = next((line for line in reversed(lines[:index]) if line.startswith("# ---")), "")
        block = [heading.strip("#- ")] if heading else []
    return " ".join(block), inline


def _shown(path: Path) -> str:
    """A path relative to the repository when inside it (the snapshot must not depend on the checkout's place)."""
    full = path.resolve()
    return str(full.relative_to(accuracy.ROOT)) if full.is_relative_to(accuracy.ROOT) else str(path)


def _json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _json_literal(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_json_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_literal(v) for k, v in value.items())
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _r(x: float | None) -> float | None:
    """A JSON-native float with 6 significant digits; None for missing or non-finite."""
    if x is None or not math.isfinite(float(x)):
        return None
    return float(f"{float(x):.6g}")


# ---------------------------------------------------------------------------------------------------------
# The table the command line prints


def print_validation(result: dict[str, Any], out: TextIO) -> None:
    """Rows (held-out ones marked *), then the figures per group, per GPU generation and precision, and overall."""
    search = result.get("search", False)
    gain = f" {'gain':>7} {'kept':>7}" if search else ""
    w = min(60, max([len(e["id"]) + 1 for e in result["rows"]] + [40]))
    out.write(f"{'run':<{w}} {'GPU prec':<11} {'GPUs':>6} {'measured s':>10} {'predicted s':>11} {'error':>7}{gain}"
              "  layout (or why not modelled)\n")
    for e in result["rows"]:
        # Four digits, zeros kept, as the pages and the plan table write step times ("4.2" was 4.200)
        pred = f"{significant(e['predicted_s']):>11}" if e["predicted_s"] is not None else f"{'-':>11}"
        meas = f"{significant(e['measured_s']):>10}" if e["measured_s"] is not None else f"{'-':>10}"
        row_gain = (f" {_pct(e.get('search_gain')):>7} {_pct(e.get('search_gain_same_options')):>7}"
                    if search else "")
        name = ("*" if e["holdout"] else " ") + e["id"]
        out.write(f"{name[:w]:<{w}} {e['generation'] + ' ' + e['precision']:<11} {e['gpus'] or '':>6} {meas} "
                  f"{pred} {_pct(e['err'], signed=True):>7}{row_gain}  {e['layout'] or _one_line(e['why'])}\n")
    out.write("* held out of every fit (planner/holdout.py)\n")
    if search:
        out.write(f"gain: published layout's step / the search's best - 1; kept: the same with the run's "
                  f"{', '.join(KEPT_OPTIONS)} kept\n")
    for title, table in (("group", result["groups"]), ("GPU and precision", result["by_generation_precision"])):
        out.write(f"\n{'by ' + title:<40} {'rows':>5} {'measured':>8} {'modelled':>8} {'median |err|':>12} "
                  f"{'max |err|':>9} {'within 10%':>10}{' search gain    kept' if search else ''}\n")
        for name, f in table.items():
            out.write(f"{name[:40]:<40} {f['rows']:>5} {f['measured']:>8} {f['modelled']:>8} "
                      f"{_pct(f['median_abs_err']):>12} {_pct(f['max_abs_err']):>9} {_pct(f['within_10pct']):>10}"
                      f"{_gains(f) if search else ''}\n")
    out.write("\n")
    for title, f in (("all rows", result["summary"]), ("held out", result["holdout"])):
        out.write(f"{title}: median |error| {_pct(f['median_abs_err'])}, max |error| {_pct(f['max_abs_err'])}, "
                  f"{_pct(f['within_10pct'])} within 10%, {f['too_fast']} predicted too fast; "
                  f"{f['modelled']} of {f['measured']} runs with a throughput modelled ({f['rows']} rows)")
        if search:
            out.write(f"; median search gain {_pct(f.get('median_search_gain'))}, "
                      f"{_pct(f.get('median_search_gain_same_options'))} with the runs' options kept")
        out.write("\n")
        if f.get("memory_rows"):
            out.write(f"  peak memory per GPU against the {f['memory_rows']} runs that state it: median |error| "
                      f"{_pct(f['memory_median_abs_err'])}, median {_pct(f['memory_median_err'], signed=True)}\n")
    out.write(f"engine {result['engine']['version']} ({result['engine']['fingerprint']})\n")


def _gains(f: dict[str, Any]) -> str:
    return f" {_pct(f.get('median_search_gain')):>11} {_pct(f.get('median_search_gain_same_options')):>7}"


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:160]
