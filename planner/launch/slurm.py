"""An sbatch script with the torchrun line for one plan; options from slurm_options.txt and torchrun_args.txt.

Placement rests on one rule the engine also uses (planner/placement.py: rank r runs on GPU r; node n holds GPUs
[n·G, (n+1)·G)): torchrun's static rendezvous with --node-rank=$SLURM_NODEID gives node n the global ranks
[n·G, (n+1)·G), local rank i on GPU i. TP groups are TP consecutive ranks (TP innermost in every rank order), so
they stay inside an NVLink domain whenever the plan's TP divides the domain, which the search checked."""
from __future__ import annotations

import re
import shlex

from ..topology import domain_gpus
from .common import Emitter, Job, heading

MASTER_PORT = 29500


def slurm(job: Job) -> tuple[str, Emitter]:
    em = Emitter.of("slurm", "torchrun")
    cluster = job.spec.cluster
    g, dom = job.gpus_per_node, domain_gpus(cluster)
    sbatch = []

    def opt(command: str, name: str, value: object = None) -> str:
        # slurm_options.txt names "sbatch --x" and "srun --x"; torchrun_args.txt names "--x"
        if not em.ok(name if command == "torchrun" else f"{command} {name}"):
            return ""
        return name if value is None else f"{name}={value}"

    sbatch.append(opt("sbatch", "--job-name", _slug(job.spec.model.name)))
    sbatch.append(opt("sbatch", "--nodes", job.nodes))
    sbatch.append(opt("sbatch", "--ntasks-per-node", 1))
    sbatch.append(opt("sbatch", "--gpus-per-node", g))
    whole = cluster.num_gpus >= cluster.node.gpus  # part of one node leaves the rest to other jobs
    if whole:
        sbatch.append(opt("sbatch", "--exclusive"))
    racks = dom // cluster.node.gpus if dom > cluster.node.gpus else 0
    segment = racks if racks and job.nodes % racks == 0 else 0  # NVLink domains span nodes (NVL72: 18 trays)
    if segment:
        sbatch.append(opt("sbatch", "--segment", segment))
    elif racks:
        em.note(f"{job.nodes} nodes are not whole NVLink domains of {racks} nodes: allocate the racks by hand")
    torchrun = [opt("torchrun", "--nnodes", job.nodes), opt("torchrun", "--nproc-per-node", g),
                opt("torchrun", "--node-rank", '"$SLURM_NODEID"'), opt("torchrun", "--master-addr", '"$MASTER_ADDR"'),
                opt("torchrun", "--master-port", '"$MASTER_PORT"')]
    srun = [opt("srun", "--ntasks-per-node", 1), opt("srun", "--kill-on-bad-exit", 1)]
    lines = ["#!/bin/bash"] + [f"#SBATCH {s}" for s in sbatch if s]
    lines += [f"# {x}" for x in heading(job, "SLURM job with torchrun", em.lists[0]) if x]
    lines += _placement_notes(job, g, dom, segment)
    if not whole:
        lines.append(f"# {cluster.num_gpus} of a node's {cluster.node.gpus} GPUs, not --exclusive: other jobs on the "
                     "node share its NVLink and NICs, which the plan's times assume are this job's")
    lines += [f"# not expressed: {n}" for n in em.notes]
    lines += ['export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
              f"export MASTER_PORT={MASTER_PORT}"]
    if job.spec.training.expandable_segments:
        lines.append("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # training.expandable_segments: "
                     "the plan keeps no memory free for fragmentation")
    lines += ['TRAIN=("${TRAIN[@]:-pretrain_gpt.py}")  # the training script and its arguments '
              "(the megatron export's MEGATRON_ARGS, say)"]
    inner = "exec torchrun " + " ".join(t for t in torchrun if t) + ' "$@"'
    lines.append(f"srun {' '.join(s for s in srun if s)} bash -c {shlex.quote(inner)} torchrun-on-node "
                 '"${TRAIN[@]}"')
    return "\n".join(lines) + "\n", em


def _placement_notes(job: Job, g: int, dom: int, segment: int) -> list[str]:
    """The rank layout, and the --segment it asks for when the job is whole NVLink domains of `segment` nodes."""
    notes = [f"# ranks: node $SLURM_NODEID runs global ranks $SLURM_NODEID*{g} .. +{g - 1}, local rank i on GPU i; "
             f"rank order {job.rank_order} (innermost first): each TP group ({job.tp} consecutive rank"
             f"{'s' if job.tp > 1 else ''}) inside one {dom}-GPU NVLink domain"]
    if segment:
        notes.append(f"# an NVLink domain is {segment} nodes: --segment={segment} keeps them in one block "
                     "(topology/block with one block per rack), and the node list must follow rack order")
    return notes


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:64] or "plan"


def rank_map(text: str) -> dict[tuple[int, int], int]:
    """(SLURM node id, local rank) -> global rank, read back from an sbatch script this module wrote: the
    torchrun line's --nnodes, --nproc-per-node and --node-rank=$SLURM_NODEID. For tests and for readers who
    want to check a script by hand."""
    nodes = int(re.search(r"--nnodes=(\d+)", text).group(1))
    per_node = int(re.search(r"--nproc-per-node=(\d+)", text).group(1))
    if '--node-rank="$SLURM_NODEID"' not in text:
        raise ValueError("the torchrun line does not pin --node-rank to $SLURM_NODEID")
    return {(n, i): n * per_node + i for n in range(nodes) for i in range(per_node)}
