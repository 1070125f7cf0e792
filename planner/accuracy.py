"""How far to trust a plan's step time: the model's measured error on comparable published runs.

`python -m planner validate --json --search` measures the engine against published runs; its output, kept as
`planner/data/validation.json` (`make validation` writes it), is what this module reads. A plan's answer then
states the median error over the published runs of the same GPU generation and precision, or says plainly that
none exist. The snapshot records a fingerprint of everything that moves the numbers (engine code, reference
data, catalog); `fingerprint()` recomputes it, so a stale snapshot is flagged, never served silently.
Also home of the two normalisers (GPU generation, precision) that group published rows and plans alike.
"""
from __future__ import annotations

import hashlib
import json
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from . import stacks
from .catalog import load_catalog
from .spec import SECTIONS, fmt_number, section_as_read, unmodified_name

PLANNER_DIR = Path(__file__).resolve().parent
ROOT = PLANNER_DIR.parent
SNAPSHOT = PLANNER_DIR / "data" / "validation.json"
# Launch-script details of published_runs.json rows (micro-batch, interleaving, gradient-overlap), by run id.
DEFAULT_CONFIGS = PLANNER_DIR / "data" / "published_run_configs.json"

# Longest name first, so that "GB200" is not read as "B200" nor "GB300" as "B300".
GENERATIONS = ("GB300", "GB200", "B300", "B200", "H200", "H800", "H100", "A100", "V100")
# GPUs without BF16 tensor cores, or whose published runs of the era trained in FP16 when the row only says
# "16-bit" or nothing (Megatron-LM trained GPT in FP16 until 2021): the rule planner/published.py applies.
FP16_ERA = ("V100", "A100")


def generation(text: str | None) -> str | None:
    """The GPU generation named in free text ("H100-80GB (table: h100_80gb)" -> "H100"), or None."""
    upper = (text or "").upper()
    return next((g for g in GENERATIONS if g in upper), None)


def precision(text: str | None, gpu_generation: str | None) -> str:
    """bf16, fp16 or fp8 from a row's free-text precision. FP8 in any form (MXFP8, Float8, blockwise) is fp8;
    an explicit BF16 wins over FP16 ("FP16/BF16 ... trains bf16"); "16-bit", "mixed" or nothing is fp16 on the
    FP16-era GPUs and bf16 on later ones."""
    lower = (text or "").lower()
    if "fp8" in lower or "float8" in lower:
        return "fp8"
    if any(word in lower for word in ("bf16", "bfloat16", "bfsixteen")):
        return "bf16"
    if "fp16" in lower or "float16" in lower:
        return "fp16"
    return "fp16" if gpu_generation in FP16_ERA else "bf16"


def cohort(gpu_generation: str | None, prec: str) -> str:
    """The key of a generation-precision cohort: "H100 bf16"."""
    return f"{gpu_generation or 'other'} {prec}"


def number_files() -> list[Path]:
    """Every file whose content can move a validation figure: the engine (not its command line), the reference
    data, the hardware catalog and the launch-script details."""
    code = [p for p in sorted(PLANNER_DIR.glob("*.py")) if p.name not in ("cli.py", "__main__.py")]
    data = [p for p in sorted((PLANNER_DIR / "data").glob("*.json")) if p != SNAPSHOT]
    fixtures = sorted((ROOT / "fixtures").glob("*.json"))
    return code + data + fixtures


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """sha256 (first 16 hex digits) over the files that move the numbers, by path relative to the repository."""
    digest = hashlib.sha256()
    for path in number_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load_snapshot(path: Path | str | None = None) -> dict[str, Any] | None:
    """The stored validation (SNAPSHOT unless given), or None when there is none or it is not readable JSON."""
    path = Path(path or SNAPSHOT)
    try:
        return _load(str(path), path.stat().st_mtime_ns)
    except (OSError, ValueError):
        return None


def _bias(figures: dict[str, Any], modelled: int) -> str:
    """Which way the error leans, when it leans: a ±6% that is -6% on the median says step times come out short.
    Nothing for one run (its error is the median) or a lean under half a percent."""
    signed, fast = figures.get("median_err"), figures.get("too_fast")
    if signed is None or fast is None or modelled < 2 or abs(signed) < 0.005:
        return ""
    way, count = ("too fast", fast) if signed < 0 else ("too slow", modelled - fast)
    return f"; predicted {abs(signed):.0%} {way} on the median ({count} of {modelled} runs {way})"


@lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> dict[str, Any]:  # cached per file version: read once per process
    return json.loads(Path(path).read_text())


def is_stale(snapshot: dict[str, Any]) -> bool:
    return (snapshot.get("engine") or {}).get("fingerprint") != fingerprint()


# GPU fields a layout's step time does not depend on: a GPU that differs from a catalog row in these alone is
# still the row the published runs checked (capacity decides which layouts fit, not how fast one runs).
TIME_FREE_GPU_FIELDS = ("name", "memory_gib")


def catalog_gpu(gpu: Mapping[str, Any]) -> tuple[str | None, dict[str, tuple[Any, Any]]]:
    """Which GPU of the shipped catalog (fixtures/, with whose figures the published runs were costed) `gpu` (spec
    fields) is: (its name, {}) when `gpu` has a row's figures, whatever its own name; else (the row it carries the
    name of, or was made from as "NAME (modified)", {field: (this GPU's value, the row's)} where they differ); else
    (None, {}). An admin's edit or a renamed row reads as the figures it holds, not as the name it has."""
    rows = _shipped_gpus()
    fields = [f.name for f in SECTIONS["cluster.gpu"] if f.name != "name"]
    own = str(gpu.get("name") or "")
    named = own if own in rows else unmodified_name(own)
    # Its own row first: the H800's figures are the H100's (they differ in NVLink, a node's field).
    for name in ([named] if named in rows else []) + list(rows):
        if all(gpu.get(k) == rows[name].get(k) for k in fields):
            return name, {}
    if named not in rows:
        return None, {}
    return named, {k: (gpu.get(k), rows[named].get(k)) for k in fields if gpu.get(k) != rows[named].get(k)}


@lru_cache(maxsize=1)
def _shipped_gpus() -> dict[str, dict[str, Any]]:
    return {name: section_as_read("cluster.gpu", row) for name, row in load_catalog()["gpu"].items()}


def for_gpu(gpu_name: str, prec: str, snapshot: dict[str, Any] | None = None,
            gpu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The measured error on published runs of the same GPU generation and precision, with a sentence saying it:
    "±7%: median over 23 published H100 BF16 runs", or that no comparable published runs exist. Given the GPU's
    figures (`gpu`, spec fields), the generation is the catalog row's whose figures it has (catalog_gpu): a GPU
    whose figures that move the step time differ from its row's (an admin's edit, a custom GPU) has none."""
    snapshot = snapshot if snapshot is not None else load_snapshot()
    differs: dict[str, tuple[Any, Any]] = {}
    row = None
    if gpu is not None:
        row, differs = catalog_gpu(gpu)
        gpu_name = row or gpu_name
    gen = generation(gpu_name) if gpu is None or row is not None else None
    who = f"{gen or gpu_name} {prec.upper()}"
    out: dict[str, Any] = {"generation": gen, "precision": prec, "runs": 0, "median_abs_err": None,
                           "max_abs_err": None, "not_modelled": 0}
    if snapshot is None:
        return {**out, "statement": "Not validated: this installation has no validation snapshot "
                                    "(make validation writes planner/data/validation.json)."}
    out["measured_with"] = {**(snapshot.get("engine") or {}), "stale": is_stale(snapshot)}
    timed = {k: v for k, v in differs.items() if k not in TIME_FREE_GPU_FIELDS}
    if timed:
        out["generation"] = None
        out["statement"] = (f"No comparable published runs: the model was checked with the catalog's figures for "
                            f"{row}, and this GPU's differ ({_differences(timed)}).")
        return _unchecked(out, snapshot)
    if gpu is not None and row is None:
        out["statement"] = ("No comparable published runs: the model was checked with the shipped catalog's GPU "
                            "figures, and this GPU's match none of them.")
        return _unchecked(out, snapshot)
    figures = (snapshot.get("by_generation_precision") or {}).get(cohort(gen, prec)) if gen else None
    if not figures or not figures.get("modelled"):
        where = f"{who} runs" if gen else f"runs on a GPU like {gpu_name!r} (no known generation in its name)"
        out["statement"] = f"No comparable published runs: the model has not been checked against {where}."
        return _unchecked(out, snapshot)
    modelled = figures["modelled"]
    out.update(runs=modelled, median_abs_err=figures["median_abs_err"], max_abs_err=figures["max_abs_err"],
               not_modelled=figures["measured"] - modelled, median_err=figures.get("median_err"),
               too_fast=figures.get("too_fast"))
    # To the tenth of a percent, as the ranking's ties are taken ("±3%" above "within 3.4%" read as two figures)
    text = (f"±{figures['median_abs_err']:.1%}: median over {modelled} published {who} "
            f"run{'s' if modelled != 1 else ''} (worst {figures['max_abs_err']:.0%})")
    text += _bias(figures, modelled)
    if out["not_modelled"]:
        more = out["not_modelled"]
        text += f"; {more} more such run{'s' if more != 1 else ''} could not be modelled"
    if out["measured_with"]["stale"]:
        text += "; measured with an earlier build of the engine"
    if differs:
        text += f"; this GPU differs from the catalog's {row} only in {_differences(differs)}, which a layout's " \
                f"step time does not depend on"
    out["statement"] = text + "."
    out["ranking"] = ranking(snapshot, figures["median_abs_err"])
    return out


def _unchecked(out: dict[str, Any], snapshot: dict[str, Any]) -> dict[str, Any]:
    """How far to trust the order where no comparable run was measured: at least as little as over all the runs
    (the median error over every modelled run). Without it, the ranked layouts of a GPU the model was never checked
    on read as the most reliably ordered of all, with none marked as a tie."""
    overall = (snapshot.get("summary") or {}).get("median_abs_err")
    out["ranking"] = ranking(snapshot, overall, unchecked=True)
    return out


def _differences(differs: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{k} {_shown(mine)}, not {_shown(theirs)}" for k, (mine, theirs) in differs.items())


def _shown(value: Any) -> str:
    return "empty" if value is None else fmt_number(value) if isinstance(value, float) else str(value)


def for_stack(name: str, snapshot: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The measured error on the published runs of a training stack (training.framework: the groups its preset
    was read from, planner/data/stacks.json), each costed with its own options: "±3%: median over 232 published
    runs of the fsdp stack". None for "generic" or a snapshot-less installation."""
    entry = stacks.STACKS.get(name)
    snapshot = snapshot if snapshot is not None else load_snapshot()
    if entry is None or snapshot is None:
        return None
    groups = set(entry["rows"])
    rows = [r for r in snapshot.get("rows") or [] if r.get("group") in groups and r.get("err") is not None]
    errors = [r["err"] for r in rows]
    # The GPUs they ran on, so that a plan on other hardware (an AMD GPU, whose own line says no comparable runs
    # exist) does not read the stack's figure as its own.
    gens = sorted({str(r.get("generation")) for r in rows if r.get("generation") not in (None, "other")})
    out: dict[str, Any] = {"stack": name, "runs": len(errors), "median_abs_err": None, "max_abs_err": None,
                           "generations": gens}
    if not errors:
        out["statement"] = f"No published runs of the {name} stack have been modelled."
        return out
    worst = max(abs(e) for e in errors)
    out.update(median_abs_err=statistics.median(abs(e) for e in errors), max_abs_err=worst)
    on = f" on {', '.join(gens[:-1])} and {gens[-1]}" if len(gens) > 1 else f" on {gens[0]}" if gens else ""
    out["statement"] = (f"On published runs of the {name} stack: ±{out['median_abs_err']:.1%}, median over "
                        f"{len(errors)} runs{on} (worst {worst:.0%}), each costed with its own settings.")
    return out


def with_stack(stated: dict[str, Any], stack: dict[str, Any] | None,
               snapshot: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan's accuracy (for_gpu) with the order trusted no further than the named training stack's runs allow:
    where the stack's median error (for_stack) is the larger, and its runs include the plan's GPU generation, the
    layouts within it are the ties. A plan on H100 naming megatron_core had its ties within the H100 BF16 runs'
    3.4%, under a line saying that stack's runs are ±8.1%."""
    ours, theirs = stated.get("median_abs_err"), (stack or {}).get("median_abs_err")
    if ours is None or theirs is None or theirs <= ours or stated.get("generation") not in stack.get("generations", []):
        return stated
    snapshot = snapshot if snapshot is not None else load_snapshot()
    if snapshot is None:
        return stated
    why = f"the median error on published runs of the {stack['stack']} stack, larger than the one above"
    return {**stated, "ranking": ranking(snapshot, theirs, because=why)}


def ranking(snapshot: dict[str, Any], tie_within: float | None, unchecked: bool = False,
            because: str = "the median error above") -> dict[str, Any]:
    """How far to trust the order of the ranked layouts: those within `tie_within` (the cohort's median error) of
    the best are not reliably ordered, and the search's claimed gain over published layouts (`validate --search`)
    says how far a predicted gain is a lead rather than a saving. The claimed gain is given per source, as the
    median of the groups' medians, beside the pooled median: one source supplies most of the reference rows, and
    the pooled figure is mostly its. The gain with the runs' own options kept (recomputation, ZeRO stage, sequence
    parallelism) is given the same way, where the snapshot has it: what the parallel layout alone buys. `unchecked`:
    no run like the plan's was measured, and `tie_within` is the median error over all the runs, a floor here.
    `tie_within` is taken to the tenth of a percent the statement writes, so that the layouts marked as ties are
    exactly those within the stated figure (3.42% marked layouts 3.3% behind the best under "within 3%")."""
    tie_within = round(tie_within, 3) if tie_within is not None else None
    groups = snapshot.get("groups") or {}
    by_group, sources = _median_of_groups(groups, "median_search_gain")
    same_options, _ = _median_of_groups(groups, "median_search_gain_same_options")
    pooled = (snapshot.get("summary") or {}).get("median_search_gain")
    parts = []
    if tie_within is not None and unchecked:
        parts.append(f"Layouts within {tie_within:.1%} of the best step time are not reliably ordered, and more may "
                     f"not be: that is the median error over all the published runs, and none like this plan's was "
                     f"measured; choose among them on memory headroom or the simpler launch")
    elif tie_within is not None:
        parts.append(f"Layouts within {tie_within:.1%} of the best step time ({because}) are not "
                     f"reliably ordered: choose among them on memory headroom or the simpler launch")
    if by_group is not None:
        pooled_text = f"; {pooled:.0%} pooled over all runs" if pooled is not None else ""
        kept_text = (f", and {same_options:.0%} with each run's recomputation, ZeRO stage and sequence parallelism "
                     f"kept" if same_options is not None else "")
        parts.append(f"on published runs searched with nothing pinned, the planner predicts its own pick "
                     f"{by_group:.0%} faster than the published layout (median over {sources} sources"
                     f"{pooled_text}){kept_text}, though many published layouts were studies, not tuned settings: "
                     f"read a predicted gain larger than the error as a lead to test, not a measured saving")
    statement = "; ".join(parts)
    return {"tie_within": tie_within, "search_gain_by_source": by_group, "search_gain_pooled": pooled,
            "search_gain_same_options_by_source": same_options, "sources": sources,
            "statement": statement[:1].upper() + statement[1:] + "." if statement else None}


def _median_of_groups(groups: dict[str, Any], key: str) -> tuple[float | None, int]:
    """The median over the groups that have `key`, and how many have it."""
    values = [g[key] for g in groups.values() if isinstance(g, dict) and g.get(key) is not None]
    return (statistics.median(values) if values else None), len(values)


def ties(plans: list[dict[str, Any]], tie_within: float | None) -> list[int]:
    """The ranks of the plans after the first whose step time is within `tie_within` of the first's (a plan stored
    without its rank has its place in the list)."""
    number = (int, float)
    if not plans or not isinstance(tie_within, number) or not isinstance(plans[0].get("step_time_s"), number):
        return []
    limit = plans[0]["step_time_s"] * (1.0 + tie_within)
    return [p.get("rank", i + 1) for i, p in enumerate(plans) if i > 0
            and isinstance(p.get("step_time_s"), number) and p["step_time_s"] <= limit]
