"""What every export needs from one ranked plan: its degrees and batch split, and the lines that name it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..memory import offloaded_layers, stage_split, vp_group
from ..spec import PlanSpec, RANK_ORDERS, RECOMPUTE
from .names import KeptList, kept


@dataclass(frozen=True)
class Job:
    """One ranked plan of one spec, as numbers the exports read."""

    spec: PlanSpec
    rank: int
    label: str
    description: str
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    micro_batch: int
    vpp: int
    recompute: str
    sequence_parallel: bool
    zero: int
    rank_order: str
    recompute_fraction: float = 1.0  # with full recompute: the share of each stage's layers recomputed

    @property
    def recompute_layers(self) -> int:
        """Layers of each stage (each virtual stage with interleaving) that full recomputation covers."""
        per_chunk = self.layers_per_stage // self.vpp
        return max(1, min(per_chunk, round(self.recompute_fraction * per_chunk)))

    @property
    def global_batch(self) -> int:
        return self.spec.training.global_batch

    @property
    def tp_wgrad_costed(self) -> bool:
        """Whether training.tp_wgrad_overlap decided how this plan's backward TP reductions were costed: TP > 1,
        and not a sequence-parallel layout under tp_comm_overlap, which overlaps every TP collective
        (steptime._tp_comm)."""
        return self.tp > 1 and not (self.spec.training.tp_comm_overlap and self.sequence_parallel)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step in each DP replica: global batch / (DP x micro-batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def vp_group(self) -> int:
        """With interleaving, the micro-batches run through one virtual stage before the next (memory.vp_group):
        PP unless the step's micro-batches are not a multiple of it."""
        return int(vp_group(np.array([self.micro_batches]), np.array([self.pp]))[0])

    @property
    def layers_per_stage(self) -> int:
        """Layers of the fullest pipeline stage, as the engine costs it: ceil(layers / PP)."""
        return -(-self.spec.model.layers // self.pp)

    @property
    def stages(self) -> list[int]:
        """Every pipeline stage's layers, first to last, as the engine costs them (memory.stage_split)."""
        return stage_split(self.spec.model.layers, self.pp)

    @property
    def virtual_stages(self) -> list[int]:
        """The layers of every virtual stage in model order, as both exports list them: each pipeline rank's first
        virtual stage, then each rank's second. A rank's earlier virtual stages take a layer more where its layers
        do not divide evenly."""
        v, stages = self.vpp, self.stages
        return [n // v + (1 if chunk < n % v else 0) for chunk in range(v) for n in stages]

    @property
    def offload_layers(self) -> int:
        """Layers of the fullest stage whose activations go to CPU memory, as the engine costs them."""
        return int(offloaded_layers(self.spec.training, self.layers_per_stage))

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.spec.cluster.num_gpus / self.spec.cluster.node.gpus))

    @property
    def gpus_per_node(self) -> int:
        return min(self.spec.cluster.node.gpus, self.spec.cluster.num_gpus)


def job_of(spec: PlanSpec, entry: dict[str, Any]) -> Job:
    """A Job from a plan entry of the answer (planner/report.py: plan_entry); raises ValueError if it is not one."""
    lay = entry.get("layout") if isinstance(entry, dict) else None
    if not isinstance(lay, dict):
        raise ValueError("a plan entry needs its layout")
    degrees = {k: int(lay[k]) for k in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp", "zero")}
    if degrees["tp"] * degrees["pp"] * degrees["dp"] * degrees["cp"] != spec.cluster.num_gpus:
        raise ValueError("the plan's tp·pp·dp·cp does not match the spec's GPU count")
    if lay["recompute"] not in RECOMPUTE or lay["rank_order"] not in RANK_ORDERS:
        raise ValueError("unknown recompute or rank order in the plan")
    fraction = lay.get("recompute_fraction")
    return Job(spec=spec, rank=int(entry.get("rank", 1)), label=str(entry.get("label", "")),
               description=str(entry.get("description", "")), recompute=lay["recompute"],
               sequence_parallel=bool(lay["sequence_parallel"]), rank_order=lay["rank_order"],
               recompute_fraction=1.0 if fraction is None else float(fraction), **degrees)


@dataclass
class Emitter:
    """Collects the names an export emits, checking each against its framework's kept list."""

    lists: tuple[KeptList, ...]
    names: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, *list_names: str) -> "Emitter":
        return cls(tuple(kept(n) for n in list_names))

    def ok(self, name: str) -> bool:
        """True (and recorded) when the kept lists hold `name`; else a note says it was left out."""
        if any(name in kl for kl in self.lists):
            self.names.append(name)
            return True
        self.note(f"{name} is not an option of {self.lists[0].source}: left out; set it by hand")
        return False

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def heading(job: Job, what: str, source: KeptList) -> list[str]:
    """The first lines of every export: which plan, and which framework version its names were checked against."""
    s = job.spec
    return [f"{what} for plan #{job.rank}: {job.label}",
            f"{s.model.name} on {s.cluster.num_gpus} x {s.cluster.gpu.name} ({s.cluster.node.name}, "
            f"{s.cluster.fabric.name})",
            f"placement: {job.description}" if job.description else "",
            f"names checked against {source.source}: {source.path}"]
