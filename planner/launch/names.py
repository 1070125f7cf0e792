"""The frameworks' own argument names, kept in planner/data/frameworks/ with the repository, file and commit they
were read from (written by scripts/framework_names.py). Every flag or key an export emits is looked up here: one
the kept list lacks is left out and said so in a comment, so a renamed flag never reaches a launch script."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

FRAMEWORKS_DIR = Path(__file__).resolve().parent.parent / "data" / "frameworks"
LISTS = {"megatron": "megatron_args.txt", "torchtitan": "torchtitan_keys.txt", "deepspeed": "deepspeed_keys.txt",
         "slurm": "slurm_options.txt", "torchrun": "torchrun_args.txt"}


@dataclass(frozen=True)
class KeptList:
    """One framework's names and where they come from (the header lines of its file)."""

    name: str
    names: frozenset[str]
    repository: str
    commit: str
    version: str
    path: str

    @property
    def source(self) -> str:
        """e.g. "NVIDIA/Megatron-LM d98e8a64ddf3 (megatron-core 0.20.0)"."""
        repo = self.repository.removeprefix("https://github.com/")
        return f"{repo} {self.commit[:12]} ({self.version.split(' (')[0]})"

    def __contains__(self, name: object) -> bool:
        return name in self.names


@lru_cache(maxsize=None)
def kept(name: str) -> KeptList:
    """The kept list `name` (a key of LISTS)."""
    path = FRAMEWORKS_DIR / LISTS[name]
    header: dict[str, str] = {}
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            key, _, value = line[1:].strip().partition(": ")
            header.setdefault(key, value)
        elif line.strip():
            names.add(line.strip())
    return KeptList(name, frozenset(names), header.get("repository", "?"), header.get("commit", "?").split()[0],
                    header.get("version", "?"), f"planner/data/frameworks/{LISTS[name]}")
