"""Check the engine against published training runs (`planner/data/published_runs.json` format).

Each row becomes a plan spec with the published layout pinned (TP, PP, DP and whatever else the row states);
the engine searches only what the row leaves open (e.g. micro-batch size, interleaving), and the predicted
step time is compared with the measured one. Interpretation rules for rows, stated once here:
- Hardware: the GPU type names a catalog GPU and its usual node (A100 "80GB" or an 80 GB memory -> 80 GB, else the
  40 GB part that DGX A100 shipped with in 2020); stated GPUs per node, NVLink domain, NICs and port speed override
  the node; the port speed picks the InfiniBand generation (100 EDR, 200 HDR, 400 NDR, 800 XDR).
- Attention kernel: runs on V100 and A100 in this format predate FlashAttention (2022) and used Megatron's
  unfused softmax; Hopper and later use flash attention.
- Recomputation: as stated; Megatron-LM's 2020 README runs used --checkpoint-activations (its TFLOP/s count the
  recomputed forward, per the rows' tflops_kind).
- Sequence parallelism and optimizer sharding are opt-in features a paper states when it uses them: a null
  means off (SP off, ZeRO stage 0). Both postdate the 2020-21 Megatron runs (Korthikanti et al. 2022).
- The measured step time: step_time_s, else the derived one, else from tokens/s/GPU, MFU or TFLOP/s/GPU (hardware
  FLOPs when the row says its TFLOP/s include recomputation, model FLOPs otherwise; attention counted over the
  full s x s square unless the row's tflops_kind says "causal").
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import Catalog, load_catalog
from .model import flops_per_token, hardware_flops_per_step, model_flops_per_step, param_count
from .report import plan
from .errors import SpecError
from .spec import PlanSpec, parse_spec

GPU_BY_KEYWORD = (("GB200", "GB200"), ("B200", "B200"), ("H200", "H200 SXM 141GB"), ("H800", "H800 SXM5 80GB"),
                  ("H100", "H100 SXM5 80GB"), ("V100", "V100 SXM3 32GB"))
NODE_BY_GPU = {"GB200": "GB200 NVL72 compute tray", "B200": "DGX B200", "H200 SXM 141GB": "HGX H200",
               "H800 SXM5 80GB": "HGX H800", "H100 SXM5 80GB": "DGX H100", "V100 SXM3 32GB": "DGX-2 (V100)",
               "A100 SXM4 80GB": "DGX A100", "A100 SXM4 40GB": "DGX A100"}
FABRIC_BY_PORT = {100: "EDR InfiniBand fat tree", 200: "HDR InfiniBand fat tree", 400: "NDR InfiniBand fat tree",
                  800: "XDR InfiniBand fat tree"}
PRE_FLASH_GPUS = ("V100", "A100")


def gpu_name(row: dict[str, Any]) -> str:
    text = (row.get("gpu_type") or "").upper()
    for keyword, name in GPU_BY_KEYWORD:
        if keyword in text:
            return name
    big = "80" in text or (row.get("gpu_memory_gb") or 0) >= 80
    return "A100 SXM4 80GB" if big else "A100 SXM4 40GB"


def _recompute(row: dict[str, Any]) -> str | None:
    text = (row.get("recompute") or "").lower()
    for value in ("selective", "full", "none"):
        if text.startswith(value) or (value == "none" and text.startswith("no")):
            return value
    if "megatron-lm readme" in row.get("source", {}).get("title", "").lower():
        return "full"
    return None


def _zero(sharding: Any) -> int:
    """optimizer_sharding: null or false -> 0; a ZeRO stage number, or "distributed optimizer" -> 1."""
    if isinstance(sharding, int) and not isinstance(sharding, bool):
        return sharding
    text = str(sharding or "").lower()
    for stage in ("3", "2"):
        if f"zero-{stage}" in text or f"zero {stage}" in text or f"stage {stage}" in text or "fsdp" in text and stage == "3":
            return int(stage)
    return 1 if text and text not in ("none", "false", "no") else 0


def _precision(row: dict[str, Any], gpu: str) -> str:
    """fp8 and bf16 as stated; "fp16", "16-bit" or unstated on V100/A100 -> fp16 (Megatron trained GPT in fp16
    until 2021; only the gradient width, 2 vs 4 bytes, differs in the model)."""
    text = (row.get("precision") or "").lower()
    if "fp8" in text:
        return "fp8"
    if "bf16" in text:
        return "bf16"
    pre_bf16 = any(g in gpu for g in PRE_FLASH_GPUS)
    return "fp16" if "fp16" in text or "16-bit" in text or (not text and pre_bf16) else "bf16"


def _gated(row: dict[str, Any], catalog: Catalog) -> bool:
    """Gated (SwiGLU) MLP if the notes say so; otherwise whichever of gated / plain matches the stated parameter
    count better (Llama-style models have ffn_hidden 2.7-3.5 h and three matrices); otherwise plain when
    ffn_hidden is 4 h."""
    notes = (row.get("arch_notes") or "").lower()
    if any(word in notes for word in ("swiglu", "gated", "geglu")):
        return True
    if any(word in notes for word in ("gelu", "4h mlp")):
        return False
    stated = row.get("params_billion")
    if stated:
        def error(gated: bool) -> float:
            doc = row_to_spec_doc(row, catalog, gated=gated)
            return abs(param_count(parse_spec(doc, catalog).model).total / 1e9 - stated)
        return error(True) < error(False)
    return bool(row.get("ffn_hidden")) and row["ffn_hidden"] != 4 * row["hidden"]


def row_to_spec_doc(row: dict[str, Any], catalog: Catalog, gated: bool | None = None) -> dict[str, Any]:
    """The plan spec document of a published run, with its stated layout pinned."""
    gpu = gpu_name(row)
    node = dict(catalog["node"][NODE_BY_GPU[gpu]])
    for key, field in (("gpus_per_node", "gpus"), ("nvlink_domain_gpus", "nvlink_domain_gpus"),
                       ("nics_per_node", "nics"), ("ib_gbps_per_port", "nic_gbits_per_s"),
                       ("nvlink_gbytes_per_s_per_gpu", "nvlink_gbytes_per_s")):
        if row.get(key):
            node[field] = row[key]
    fabric = FABRIC_BY_PORT.get(int(node["nic_gbits_per_s"]), "NDR InfiniBand fat tree")
    model = {"name": row["model"], "layers": row["layers"], "hidden": row["hidden"], "heads": row["heads"],
             "kv_heads": row.get("kv_heads"), "ffn_hidden": row.get("ffn_hidden"), "vocab": row["vocab"],
             "seq_len": row["seq_len"], "gated_mlp": _gated(row, catalog) if gated is None else gated,
             "tied_embeddings": "tied" in (row.get("arch_notes") or "").lower()}
    for key in ("experts", "top_k"):
        if row.get(key):
            model[key] = row[key]
    layout = {k: row.get(k) for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch")}
    layout["vpp"] = row.get("vp")
    layout["recompute"] = _recompute(row)
    layout["sequence_parallel"] = bool(row.get("sequence_parallel"))
    layout["zero"] = _zero(row.get("optimizer_sharding"))
    layout["cp"] = layout["cp"] or 1
    layout["ep"] = layout["ep"] or 1
    attention = "unfused" if any(g in gpu for g in PRE_FLASH_GPUS) else "flash"
    return {"model": model,
            "training": {"global_batch": row["global_batch"], "precision": _precision(row, gpu), "attention": attention},
            "cluster": {"num_gpus": row["gpus"], "gpu": gpu, "node": node, "fabric": fabric},
            "layout": {k: v for k, v in layout.items() if v is not None}}


def measured_step_time(row: dict[str, Any], spec: PlanSpec) -> float | None:
    if row.get("step_time_s"):
        return float(row["step_time_s"])
    if (row.get("derived") or {}).get("derived_step_time_s"):
        return float(row["derived"]["derived_step_time_s"])
    tokens = spec.training.global_batch * spec.model.seq_len
    n = spec.cluster.num_gpus
    if row.get("tokens_per_sec_per_gpu"):
        return tokens / (row["tokens_per_sec_per_gpu"] * n)
    model_flops = model_flops_per_step(spec.model, spec.training.global_batch)
    if "causal" in (row.get("tflops_kind") or "").lower():
        # The row counts only the unmasked half of the attention square (model.flops_per_token counts all of it).
        half_attention = 3 * 0.5 * flops_per_token(spec.model).attention_per_layer * spec.model.layers
        model_flops -= half_attention * spec.training.global_batch * spec.model.seq_len
    if row.get("mfu_percent"):
        return model_flops / (row["mfu_percent"] / 100 * spec.cluster.gpu.peak_tflops * 1e12 * n)
    if row.get("tflops_per_gpu"):
        kind = (row.get("tflops_kind") or "").lower()
        recompute = spec.layout.recompute or "none"
        flops = hardware_flops_per_step(spec.model, spec.training.global_batch, recompute) \
            if "recompute" in kind or "eq.3" in kind else model_flops
        return flops / (row["tflops_per_gpu"] * 1e12 * n)
    return None


@dataclass(frozen=True)
class Comparison:
    id: str
    measured_s: float
    predicted_s: float | None    # None: the engine found the published layout infeasible
    layout: str
    why: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted_s is None else self.predicted_s / self.measured_s - 1.0


def apply_overlay(doc: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Add layout details the row leaves null but its authors published elsewhere (launch scripts)."""
    for key in ("micro_batch", "vpp", "recompute", "sequence_parallel", "zero"):
        if key in overlay:
            doc["layout"][key] = overlay[key]
    if "overlap_grad_reduce" in overlay:
        doc["training"]["overlap_grad_reduce"] = overlay["overlap_grad_reduce"]
    return doc


def compare(rows: list[dict[str, Any]], catalog: Catalog | None = None,
            overlays: dict[str, dict[str, Any]] | None = None) -> list[Comparison]:
    catalog = catalog or load_catalog()
    out = []
    for row in rows:
        try:
            doc = apply_overlay(row_to_spec_doc(row, catalog), (overlays or {}).get(row.get("id"), {}))
            spec = parse_spec(doc, catalog)
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            # A row this harness cannot turn into a spec is reported, not raised: one odd row must not hide
            # the others' results.
            why = str(exc) if isinstance(exc, SpecError) else f"row lacks a usable {exc}"
            out.append(Comparison(str(row.get("id")), float("nan"), None, "", f"no spec: {why}"))
            continue
        measured = measured_step_time(row, spec)
        if measured is None:
            continue
        answer = plan(spec, top=1)
        if answer["plans"]:
            best = answer["plans"][0]
            out.append(Comparison(row["id"], measured, best["step_time_s"], best["label"]))
        else:
            why = "; ".join(answer["rejected_examples"].values())
            out.append(Comparison(row["id"], measured, None, "", why))
    return out


def error_table(comparisons: list[Comparison]) -> str:
    lines = [f"{'run':<26} {'measured s':>10} {'predicted s':>11} {'error':>7}  layout"]
    for c in comparisons:
        pred = f"{c.predicted_s:11.3f}" if c.predicted_s is not None else f"{'infeasible':>11}"
        err = f"{c.error:+7.1%}" if c.error is not None else f"{'-':>7}"
        lines.append(f"{c.id:<26} {c.measured_s:10.3f} {pred} {err}  {c.layout or c.why}")
    errors = [abs(c.error) for c in comparisons if c.error is not None]
    if errors:
        lines.append(f"median |error| {statistics.median(errors):.1%}, max |error| {max(errors):.1%}, "
                     f"{len(errors)} runs")
    return "\n".join(lines)


def load_overlays(path: Path | str) -> dict[str, dict[str, Any]]:
    return json.loads(Path(path).read_text())["runs"]


def load_rows(path: Path | str) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text())
    return data["cases"] if isinstance(data, dict) else data
