"""Write the argument names of Megatron-LM, torchtitan or DeepSpeed, read from a git mirror, as a names-only list.

    python scripts/framework_names.py megatron   MIRROR [REF] > planner/data/frameworks/megatron_args.txt
    python scripts/framework_names.py torchtitan MIRROR [REF] > planner/data/frameworks/torchtitan_keys.txt
    python scripts/framework_names.py deepspeed  MIRROR [REF] > planner/data/frameworks/deepspeed_keys.txt
    python scripts/framework_names.py slurm      MIRROR [REF] > planner/data/frameworks/slurm_options.txt

(MIRROR is a bare clone's git directory. torchrun_args.txt is written by hand: see its header.)

The sources are parsed (ast), never imported, so no framework needs installing. Only names are written, with a
header naming the repository, the files, the commit and the version; the launch-configuration tests check every
flag and key the planner emits against these lists (tests/engine/test_launch.py).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator

MEGATRON_ARGS = "megatron/training/arguments.py"
TORCHTITAN_CONFIG = "torchtitan/config/job_config.py"
DEEPSPEED_FILES = {
    "constants": "deepspeed/runtime/constants.py",
    "zero": "deepspeed/runtime/zero/config.py",
    "precision": "deepspeed/runtime/precision_config.py",
    "activation": "deepspeed/runtime/activation_checkpointing/config.py",
}


def git(mirror: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, *args], check=True, capture_output=True, text=True).stdout


def show(mirror: str, ref: str, path: str) -> str:
    return git(mirror, "show", f"{ref}:{path}")


def header(repo: str, mirror: str, ref: str, paths: list[str], version: str, what: str) -> list[str]:
    commit = git(mirror, "rev-parse", f"{ref}^{{commit}}").strip()
    date = git(mirror, "show", "-s", "--format=%cs", commit).strip()
    return [f"# {what}", f"# repository: https://github.com/{repo}", f"# commit: {commit} ({date})",
            f"# version: {version}", *[f"# read from: {p}" for p in paths],
            "# written by scripts/framework_names.py (names only; no code copied)"]


# --------------------------------------------------------------------------------------------------------
# Dataclass fields (shared by Megatron's ArgumentGroupFactory and torchtitan's JobConfig)


def class_index(mirror: str, ref: str, prefix: str) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    index: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for path in git(mirror, "ls-tree", "-r", "--name-only", ref, prefix).split():
        if path.endswith(".py") and "/tests/" not in path:
            try:
                tree = ast.parse(show(mirror, ref, path))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    index.setdefault(node.name, []).append((path, node))
    return index


def pick(index: dict, name: str, prefer: tuple[str, ...]) -> ast.ClassDef | None:
    found = index.get(name, [])
    for p in prefer:
        for path, node in found:
            if path.startswith(p):
                return node
    return found[0][1] if found else None


def _field_call(value: ast.expr | None) -> ast.Call | None:
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "field":
        return value
    return None


def _keyword(call: ast.Call | None, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None) if call else None


def dataclass_fields(index: dict, cls: ast.ClassDef, prefer: tuple[str, ...]) -> Iterator[tuple[str, ast.AnnAssign]]:
    """(name, node) of each init field, bases first, as dataclasses.fields() orders them."""
    seen: dict[str, ast.AnnAssign] = {}
    for base in cls.bases:
        base_cls = pick(index, getattr(base, "id", ""), prefer)
        if base_cls is not None:
            seen.update(dict(dataclass_fields(index, base_cls, prefer)))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            init = _keyword(_field_call(node.value), "init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue
            seen[node.target.id] = node
    return iter(seen.items())


# --------------------------------------------------------------------------------------------------------
# Megatron-LM


def _is_bool(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("bool", "Optional[bool]", "bool|None", "typing.Optional[bool]")


def _factory_flags(name: str, node: ast.AnnAssign) -> list[str]:
    """Megatron's ArgumentGroupFactory: --field-name; a bool not False by default: --no-/--disable-field-name;
    metadata["argparse_meta"]["arg_names"] wins."""
    call = _field_call(node.value)
    meta = _keyword(call, "metadata")
    if isinstance(meta, ast.Dict):
        for k, v in zip(meta.keys, meta.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                for k2, v2 in zip(v.keys, v.values, strict=True):
                    if isinstance(k2, ast.Constant) and k2.value == "arg_names" and isinstance(v2, ast.List):
                        return [e.value for e in v2.elts if isinstance(e, ast.Constant)]
    flag = "--" + name.replace("_", "-")
    if _is_bool(node.annotation):
        default = _keyword(call, "default") if call else node.value
        if not (isinstance(default, ast.Constant) and default.value is False):
            return ["--no-" + flag[2:], "--disable-" + flag[2:]]
    return [flag]


def _names_in(function: ast.FunctionDef, var: str) -> set[str]:
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == var for t in node.targets):
            if isinstance(node.value, ast.List):
                return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def megatron(mirror: str, ref: str) -> list[str]:
    tree = ast.parse(show(mirror, ref, MEGATRON_ARGS))
    flags: set[str] = set()
    index = class_index(mirror, ref, "megatron")
    prefer = ("megatron/core", "megatron/training")
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            attr = getattr(call.func, "attr", getattr(call.func, "id", ""))
            if attr == "add_argument":
                flags |= {a.value for a in call.args if isinstance(a, ast.Constant)
                          and isinstance(a.value, str) and a.value.startswith("-")}
            elif attr == "ArgumentGroupFactory" and call.args and isinstance(call.args[0], ast.Name):
                exclude_node = _keyword(call, "exclude")
                exclude = ({e.value for e in exclude_node.elts} if isinstance(exclude_node, ast.List)
                           else _names_in(function, exclude_node.id) if isinstance(exclude_node, ast.Name) else set())
                cls = pick(index, call.args[0].id, prefer)
                if cls is None:
                    raise SystemExit(f"cannot find class {call.args[0].id}")
                for name, node in dataclass_fields(index, cls, prefer):
                    if name not in exclude:
                        flags |= set(_factory_flags(name, node))
    info = show(mirror, ref, "megatron/core/package_info.py")
    version = ".".join(re.search(rf"^{k} = (\d+)", info, re.M).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    head = header("NVIDIA/Megatron-LM", mirror, ref, [MEGATRON_ARGS, "megatron/training/argument_utils.py "
                  "(ArgumentGroupFactory: dataclass fields become --flags)", "the dataclasses it names"],
                  f"megatron-core {version} (megatron/core/package_info.py)",
                  "Megatron-LM command-line flags (pretrain_gpt.py and friends), one a line")
    return head + sorted(flags)


# --------------------------------------------------------------------------------------------------------
# torchtitan (TOML job config: [section] key = value)


def torchtitan(mirror: str, ref: str) -> list[str]:
    index = class_index(mirror, ref, "torchtitan/config")
    keys: list[str] = []

    def walk(cls: ast.ClassDef, prefix: str) -> None:
        for name, node in dataclass_fields(index, cls, ("torchtitan/config",)):
            inner = pick(index, ast.unparse(node.annotation), ("torchtitan/config",))
            if inner is not None:
                walk(inner, f"{prefix}{name}.")
            else:
                keys.append(prefix + name)

    walk(pick(index, "JobConfig", ("torchtitan/config",)), "")
    tags = git(mirror, "tag", "--points-at", ref).split()
    head = header("pytorch/torchtitan", mirror, ref, [TORCHTITAN_CONFIG], ", ".join(tags) or ref,
                  "torchtitan TOML job-config keys as section.key (nested tables dotted), one a line")
    return head + sorted(keys)


# --------------------------------------------------------------------------------------------------------
# DeepSpeed (JSON config)


def _string_constants(source: str) -> list[str]:
    tree = ast.parse(source)
    return [n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str) and re.fullmatch(r"[a-z_0-9]+", n.value.value)]


def _model_fields(source: str, class_name: str) -> list[str]:
    """A pydantic config model's keys: field names and their aliases."""
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == class_name)
    names = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
            if isinstance(node.value, ast.Call):
                alias = _keyword(node.value, "alias")
                if isinstance(alias, ast.Constant):
                    names.append(alias.value)
    return names


def deepspeed(mirror: str, ref: str) -> list[str]:
    src = {k: show(mirror, ref, p) for k, p in DEEPSPEED_FILES.items()}
    keys = {f"{k}" for k in _string_constants(src["constants"])}
    keys |= {f"zero_optimization.{k}" for k in _model_fields(src["zero"], "DeepSpeedZeroConfig")}
    keys |= {f"bf16.{k}" for k in _model_fields(src["precision"], "DeepSpeedBF16Config")}
    keys |= {f"fp16.{k}" for k in _model_fields(src["precision"], "DeepSpeedFP16Config")}
    act = [k for k in _string_constants(src["activation"]) if k != "activation_checkpointing"]
    keys |= {f"activation_checkpointing.{k}" for k in act}
    version = show(mirror, ref, "version.txt").strip()
    head = header("deepspeedai/DeepSpeed", mirror, ref, list(DEEPSPEED_FILES.values()), version,
                  "DeepSpeed config keys: plain names are the key strings of runtime/constants.py (any level); "
                  "dotted names are the fields of the zero_optimization, bf16, fp16 and activation_checkpointing "
                  "sections")
    return head + sorted(keys)


# --------------------------------------------------------------------------------------------------------
# SLURM (sbatch and srun options, from their man pages)


def slurm(mirror: str, ref: str) -> list[str]:
    names: set[str] = set()
    pages = ["doc/man/man1/sbatch.1", "doc/man/man1/srun.1"]
    for page in pages:
        lines = show(mirror, ref, page).splitlines()
        for tag, line in zip(lines, lines[1:]):  # an option's heading is the line after .TP
            if tag.startswith(".TP"):
                for m in re.finditer(r"\\fB\\-\\-([a-z0-9\\-]+)\\fR", line):
                    names.add(page.rsplit("/", 1)[1][:-2] + " --" + m.group(1).replace("\\-", "-"))
    meta = show(mirror, ref, "META")
    version = re.search(r"Version:\s*(\S+)", meta).group(1)
    head = header("SchedMD/slurm", mirror, ref, pages, f"Slurm {version} (META)",
                  "SLURM options as 'command --option', one a line")
    return head + sorted(names)


if __name__ == "__main__":
    kind, mirror = sys.argv[1], sys.argv[2]
    ref = sys.argv[3] if len(sys.argv) > 3 else "HEAD"
    print("\n".join({"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed,
            "slurm": slurm}[kind](mirror, ref)))
