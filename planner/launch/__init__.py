"""Launch configuration for a ranked plan: Megatron-LM arguments, a torchtitan TOML, a DeepSpeed config and an
sbatch script with its torchrun line. Pure engine code: a PlanSpec and one plan entry of the answer in, text out.

Every flag and key is checked against the framework's own list of names kept in planner/data/frameworks/ (with
the repository and commit it was read from); what a framework cannot express is said in a comment line."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec import PlanSpec
from .common import Job, job_of
from .deepspeed import deepspeed
from .megatron import megatron
from .slurm import slurm
from .torchtitan import torchtitan

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "slurm")
_BUILDERS = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "slurm": slurm}
TITLES = {"megatron": "Megatron-LM arguments", "torchtitan": "torchtitan TOML", "deepspeed": "DeepSpeed config",
          "slurm": "SLURM + torchrun"}
FILENAMES = {"megatron": "megatron_args.sh", "torchtitan": "torchtitan.toml", "deepspeed": "ds_config.json",
             "slurm": "launch.sbatch"}


@dataclass(frozen=True)
class Export:
    framework: str
    text: str
    names: tuple[str, ...]   # every flag or key in `text`, each found in the kept list
    notes: tuple[str, ...]   # what the framework cannot express (also comment lines in `text`)
    source: str              # the framework version the names were checked against

    def as_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "title": TITLES[self.framework],
                "filename": FILENAMES[self.framework], "text": self.text, "names": list(self.names),
                "notes": list(self.notes), "source": self.source}


def launch_config(spec: PlanSpec, entry: dict[str, Any], framework: str) -> Export:
    """One framework's configuration for the plan `entry` (an item of the answer's "plans")."""
    if framework not in _BUILDERS:
        raise ValueError(f"unknown framework {framework!r} (known: {', '.join(FRAMEWORKS)})")
    text, em = _BUILDERS[framework](job_of(spec, entry))
    return Export(framework, text, tuple(em.names), tuple(em.notes), em.lists[0].source)


# The launch configuration of the training stack a request names (training.framework) comes first.
STACK_CONFIG = {"megatron_core": "megatron", "torchtitan": "torchtitan"}


def launch_configs(spec: PlanSpec, entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every framework's configuration for one plan, JSON-native: {framework: Export.as_dict()}, the request's
    own stack's first."""
    first = STACK_CONFIG.get(spec.training.framework)
    return {fw: launch_config(spec, entry, fw).as_dict() for fw in sorted(FRAMEWORKS, key=lambda fw: fw != first)}


__all__ = ["FRAMEWORKS", "Export", "Job", "launch_config", "launch_configs"]
