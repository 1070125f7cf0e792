"""The plan form, built from the engine's field tables (planner.spec.SECTIONS): bounds, units and help are
written once, in the engine. Validation is the engine's too: `clean()` builds a spec document and calls
`parse_spec`, and each field-named message lands next to its field.

Field names are `<section>__<field>` (`model__layers`, `gpu__peak_tflops`). A catalog dropdown (model preset,
GPU, node, fabric) either names a catalog row, whose values are used as they are, or is "custom", and then
the fields below it are used. Without JavaScript that rule is all there is; with it, form.js fills the
fields from the chosen row and switches to "custom" when someone edits one.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django import forms

from planner import PlanSpec, SpecError, stacks
from planner.catalog import Catalog
from planner.spec import MAX_GPUS, REQUIRED, SECTIONS, Field, fmt_number

from . import options, services

CUSTOM = "custom"
HARDWARE = ("gpu", "node", "fabric")
# spec section -> form prefix
PREFIX = {"model": "model", "training": "training", "cluster.gpu": "gpu", "cluster.node": "node",
          "cluster.fabric": "fabric", "layout": "layout"}
SECTION_OF = {prefix: section for section, prefix in PREFIX.items()}
MODEL_MORE = ("experts", "top_k", "router_groups", "router_group_top_k", "expert_ffn_hidden", "shared_experts",
              "dense_layers", "tied_embeddings")
# Presentation only: the training section's options under headings, so a planner finds the one a stack sets.
# A training field named in no group still shows, under the last heading (tests/web/test_forms.py checks that
# every field is in exactly one group).
TRAINING_GROUPS = (
    ("Batch and precision", ("global_batch", "precision", "tokens")),
    ("Training stack", ("framework",)),
    ("Communication overlap", ("overlap_grad_reduce", "tp_comm_overlap", "tp_wgrad_overlap", "pp_comm_overlap",
                               "ep_comm_overlap")),
    ("FP8", ("fp8_recipe", "fp8_param_gather", "fp8_weight_cache", "fp8_saved_inputs")),
    ("Sharding, memory and recomputation", ("zero_granularity", "grad_reduce_dtype", "optimizer_states",
                                            "checkpoint_impl", "partition_activations",
                                            "activation_offload_layers", "expandable_segments")),
    ("Context and expert parallelism", ("cp_impl", "cp_load_balance", "ep_dispatch", "ep_dispatch_dtype",
                                        "expert_gemm")),
    ("Kernels", ("attention", "projections", "cross_entropy", "elementwise")),
)

# Presentation only: the names people read. Units come from the engine's table.
LABELS = {
    "layers": "Layers", "hidden": "Hidden size", "heads": "Attention heads", "kv_heads": "KV heads",
    "ffn_hidden": "FFN hidden size", "gated_mlp": "Gated MLP (SwiGLU)", "vocab": "Vocabulary",
    "seq_len": "Sequence length", "experts": "Experts", "top_k": "Experts per token (top-k)",
    "router_group_top_k": "Router groups per token", "expert_ffn_hidden": "Expert FFN hidden size",
    "shared_experts": "Shared experts", "dense_layers": "Dense layers first", "tied_embeddings": "Tied embeddings",
    "global_batch": "Global batch", "precision": "Precision", "tokens": "Tokens to train",
    "framework": "Training stack",
    "peak_tflops": "Peak 16-bit", "memory_gib": "Memory", "memory_gbytes_per_s": "Memory bandwidth",
    "fp8_tflops": "Peak FP8", "bf16": "BF16 tensor cores", "sm_count": "SMs", "gpus": "GPUs per node",
    "nvlink_domain_gpus": "NVLink domain", "nvlink_gbytes_per_s": "NVLink bandwidth", "nics": "NICs per node",
    "nic_gbits_per_s": "NIC speed", "nvlink_sharp": "NVLink SHARP (NVLS)", "topology": "Topology",
    "latency_us": "Latency", "oversubscription": "Oversubscription", "kind": "Link technology",
    "link_gbits_per_s": "Link speed", "switch_radix": "Switch radix", "pod_gpus": "Pod size (GPUs)",
    "pod_oversubscription": "Oversubscription between pods", "group_gpus": "Dragonfly group (GPUs)",
    "tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "ep": "EP", "micro_batch": "Micro-batch",
    "vpp": "Virtual stages (VPP)", "recompute": "Recompute", "sequence_parallel": "Sequence parallel",
    "zero": "ZeRO stage", "rank_order": "Rank order", "name": "Name",
    "tp_wgrad_overlap": "TP gradient reductions beside weight-gradient GEMMs",
    "cudnn_attention_efficiency": "cuDNN attention efficiency", "host_gbytes_per_s": "Host link bandwidth",
}

# Only for engine fields that have no help text of their own yet.
FALLBACK_HELP = {"name": "Free text, shown on the plan page.",
                 "topology": "How the switches connect the nodes: fat tree, rail-optimized, dragonfly or torus."}

# The example a new form starts from, for what the engine leaves to the user: the catalog rows to use and the
# required numbers. Every other field starts at the engine's own default (`engine_initial`), so an untouched
# form asks for what the same request sent to the API or the CLI asks for.
EXAMPLE = {
    "model_preset": "Llama 3 70B", "num_gpus": 512, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
    "fabric": "NDR InfiniBand fat tree", "training__global_batch": 512,
}


# For a field with no entry in LABELS (one the engine added since): its name, with these words spelled out.
WORDS = {"tp": "TP", "pp": "PP", "dp": "DP", "cp": "CP", "ep": "EP", "fp8": "FP8", "gemm": "GEMM", "hbm": "HBM",
         "moe": "MoE", "nvlink": "NVLink", "sm": "SM", "comm": "communication", "grad": "gradient", "zero": "ZeRO"}
UNIT_WORDS = ("us", "s", "gib")  # a name's unit suffix, which the label gives in brackets instead


def field_label(f: Field) -> str:
    label = LABELS.get(f.name) or _label_from_name(f)
    return f"{label} ({f.unit})" if f.unit else label


def _label_from_name(f: Field) -> str:
    words = f.name.split("_")
    if f.unit and len(words) > 1 and words[-1] in UNIT_WORDS:
        words = words[:-1]
    text = " ".join(WORDS.get(w, w) for w in words)
    return text[:1].upper() + text[1:]


def engine_default(f: Field) -> Any:
    """The engine's default for a field as the form shows it: None (left empty) where it has none."""
    return None if f.default is REQUIRED else f.default


def engine_initial() -> dict[str, Any]:
    """{form field name: the engine's default} for every field of every section the form shows."""
    return {f"{prefix}__{f.name}": _as_choice(engine_default(f)) if section == "layout" else engine_default(f)
            for section, prefix in PREFIX.items() for f in SECTIONS[section]}


def _form_field(f: Field, *, searchable: bool) -> forms.Field:
    """A form field for one engine field, starting at the engine's default. `searchable` (layout pins) adds a
    blank "search" choice."""
    common = {"label": field_label(f), "help_text": f.help or FALLBACK_HELP.get(f.name, ""), "required": False,
              "initial": _as_choice(engine_default(f)) if searchable else engine_default(f)}
    if f.choices or (f.kind is bool and (searchable or f.default is None)):
        options = [(c, c) for c in f.choices] if f.choices else [("true", "yes"), ("false", "no")]
        # A yes/no whose default the engine derives (dropout: on for a GPT-style MLP) needs a third state, which a
        # checkbox cannot post: unticked would be an explicit "no" where the API and the CLI take the default.
        blank = [("", "search")] if searchable else [("", "default")] if f.kind is bool else []
        return forms.ChoiceField(choices=blank + options, **common)
    if f.kind is bool:
        return forms.BooleanField(**common)
    if f.kind is str:
        return forms.CharField(max_length=200, **common)
    big = f.hi is not None and f.hi >= 1e12
    if big:  # token counts read best as 15e12
        placeholder = "e.g. 15e12"
    else:
        # Blank means "search" for a pin and "the engine's default" for an optional field.
        placeholder = "search" if searchable else ("default" if f.default is None else None)
    # Numbers stay text here: the engine converts them and words the message when they are wrong.
    widget = number_input(f.kind is int and not big, f.lo, f.hi, placeholder)
    return forms.CharField(max_length=40, widget=widget, **common)


class NumberText(forms.TextInput):
    """A text box that shows a float as the engine writes numbers (fmt_number): "989" and "1000000000000", not
    Python's "989.0" and "1000000000000.0" (a saved plan's tokens in "edit a copy")."""

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, float) and math.isfinite(value):
            return fmt_number(value)
        return super().format_value(value)


def number_input(whole: bool, lo: float | None, hi: float | None, placeholder: str | None = None) -> forms.TextInput:
    """A text box for a number from `lo` to `hi` (the engine's bounds, said on hover). Not <input type=number>:
    for a half-typed "1e" or "8," that posts nothing, so a pin would silently become "search", an optional field
    its default and a required one "is required"; as text, the engine sees what was typed and names it.
    `inputmode` still brings up a numeric keypad."""
    attrs = {"inputmode": "numeric" if whole else "decimal"}
    if lo is not None and hi is not None:
        attrs["title"] = f"{'a whole number' if whole else 'a number'} from {fmt_number(lo)} to {fmt_number(hi)}"
    return NumberText(attrs=attrs | ({"placeholder": placeholder} if placeholder else {}))


# A catalog row deleted or renamed in the admin while the form was open: the page shows the rows there are now.
GONE_FROM_CATALOG = {"invalid_choice": "“%(value)s” is no longer in the catalog (deleted or renamed since this page "
                                       "was opened): choose a row again, or “custom”"}


def show_gone_choices(form: forms.Form, names: tuple[str, ...]) -> None:
    """A catalog row deleted or renamed since the page was opened stays chosen in its dropdown, marked, and is
    refused again if posted as it is (GONE_FROM_CATALOG). Unlisted, the browser showed the plan form's first row
    instead, with its values below, and posting the page unchanged planned on that other hardware; a sweep's list
    dropped it without a word."""
    if not form.is_bound:
        return
    for name in names:
        field = form.fields[name]
        listed = {value for value, _ in field.choices}
        posted = form.data.getlist(name) if hasattr(form.data, "getlist") else form.data.get(name)
        posted = posted if isinstance(posted, list) else [posted]
        gone = [v for v in dict.fromkeys(posted) if isinstance(v, str) and v and v not in listed]
        if gone:  # the widget's list only: the field's own choices still refuse them
            field.widget.choices = [(v, f"{v} (no longer in the catalog)") for v in gone] + list(field.choices)


class PlanForm(forms.Form):
    def __init__(self, *args: Any, catalog: Catalog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.catalog = catalog
        self.spec: PlanSpec | None = None
        self.option_sources: dict[str, str] = {}  # which modelling options the person set (webui/options.py)
        self.fields["model_preset"] = forms.ChoiceField(
            label="Model", choices=self._choices("model", "custom architecture"), error_messages=GONE_FROM_CATALOG,
            help_text="A preset's values are used as they are; choose “custom architecture” to type your own.")
        self._add_section("model")
        self._add_section("training")
        self.fields["training__framework"].choices = [(stacks.GENERIC, "generic: each option's own default")] + [
            (name, f"{name}: {entry['label']}") for name, entry in stacks.describe().items()]
        # The stack whose settings the option fields showed when the page was drawn (the page's script keeps it
        # current). A browser without the script posts the old stack's settings under a newly chosen stack; those
        # are then left to the new stack, and only what the person changed counts as set (_stack_filled).
        self.fields["stack_shown"] = forms.CharField(
            required=False, widget=forms.HiddenInput,  # any value that names no stack is ignored, never an error
            initial=self.initial.get("training__framework") or stacks.GENERIC,
            help_text="The training stack whose settings the option fields show.")
        self.fields["num_gpus"] = forms.CharField(
            label="GPUs", max_length=40, required=False, help_text="GPUs in the job: a multiple of GPUs per node.",
            widget=number_input(True, 1, MAX_GPUS))
        for hw, label in (("gpu", "GPU"), ("node", "Node"), ("fabric", "Fabric")):
            self.fields[hw] = forms.ChoiceField(
                label=label, choices=self._choices(hw, f"custom {label if hw == 'gpu' else hw}"),
                error_messages=GONE_FROM_CATALOG, help_text="From the hardware catalog, or custom values.")
            self._add_section(SECTION_OF[hw])
        self._add_section("layout", searchable=True)
        show_gone_choices(self, ("model_preset", "gpu", "node", "fabric"))

    def _choices(self, section: str, custom_label: str) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted(self.catalog.get(section, {}))] + [(CUSTOM, custom_label)]

    def _add_section(self, section: str, *, searchable: bool = False) -> None:
        for f in SECTIONS[section]:
            self.fields[f"{PREFIX[section]}__{f.name}"] = _form_field(f, searchable=searchable)

    # -----------------------------------------------------------------------------------------------------
    # Layout for the template

    def fieldsets(self) -> list[dict[str, Any]]:
        def names(prefix: str, exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> list:
            return [self[n] for n in self.fields if n.startswith(prefix + "__")
                    and n.split("__", 1)[1] not in exclude and (only is None or n.split("__", 1)[1] in only)]

        more = names("model", only=MODEL_MORE)
        sets = [
            {"id": "model", "title": "Model", "selector": self["model_preset"],
             "fields": names("model", exclude=MODEL_MORE), "more": more,
             "more_title": "Mixture of experts and embeddings",
             # open where a message must be seen: the banner says the messages are next to their fields
             "more_open": any(f.errors for f in more)},
            {"id": "training", "title": "Training", "groups": self._training_groups()},
            {"id": "cluster", "title": "Cluster", "fields": [self["num_gpus"]]},
        ]
        for hw in HARDWARE:
            sets.append({"id": hw, "title": self.fields[hw].label, "selector": self[hw], "custom": True,
                         "fields": names(hw)})
        pins = names("layout")
        # A copy of a plan with pins ("edit a copy") opens the section and names them: closed, a pinned TP 16 went
        # with the next request unseen.
        pinned = [f.label for f in pins if f.value() not in (None, "") and str(f.value()) != str(f.field.initial)]
        sets.append({"id": "layout", "title": "Pin the layout (optional)", "fields": pins,
                     "collapsed": True, "open": bool(pinned), "pinned": pinned,
                     "intro": "Leave a field on “search” and the planner tries every valid value."})
        return sets

    def stack_data(self) -> dict[str, Any]:
        """What the page's script needs to fill the training options when the stack changes: each stack's settings
        and, for an option a stack leaves alone, the engine's default."""
        return {"stacks": {name: entry["options"] for name, entry in stacks.describe().items()},
                "defaults": _stack_option_defaults()}

    def _training_groups(self) -> list[dict[str, Any]]:
        named = {n for _, group in TRAINING_GROUPS for n in group}
        groups = [{"title": title, "fields": [self[f"training__{n}"] for n in names
                                              if f"training__{n}" in self.fields]}
                  for title, names in TRAINING_GROUPS]
        groups[-1]["fields"] += [self[n] for n in self.fields
                                 if n.startswith("training__") and n.split("__", 1)[1] not in named]
        return [g for g in groups if g["fields"]]

    # -----------------------------------------------------------------------------------------------------
    # Validation: the engine's

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:  # a choice outside the list; the engine would only repeat it
            return cleaned
        data = self.spec_data()
        try:
            self.spec = services.spec_parse(data=data, catalog=self.catalog)
        except SpecError as err:
            for e in err.errors:
                if e.field == "model" and any(o.field.startswith("model.") for o in err.errors):
                    # The engine's word to an API caller whose inline model carries a preset's name ("takes
                    # nothing from the preset ..., or name the preset"): here every model field is on the page,
                    # and each missing one says "is required" beside itself.
                    continue
                target, own = self._field_for(e.field)
                # Next to its own field the message needs no name; elsewhere it says which field it means.
                self.add_error(target, e.message if own else str(e))
            return cleaned
        # Every field is posted, so only one that differs from what the engine would assume counts as set.
        stated = options.unstated(data=data, catalog=self.catalog)
        self.option_sources = services.spec_option_sources(data=stated, catalog=self.catalog)
        return cleaned

    def spec_data(self) -> dict[str, Any]:
        """The spec document this form describes (catalog rows by name, custom sections inline)."""
        preset = self.cleaned_data.get("model_preset")
        cluster: dict[str, Any] = {"num_gpus": self._value("num_gpus")}
        for hw in HARDWARE:
            choice = self.cleaned_data.get(hw)
            cluster[hw] = self._section_values(hw) if choice == CUSTOM else choice
        layout = {k: v for k, v in self._section_values("layout").items() if v is not None}
        return {
            "model": self._section_values("model") if preset == CUSTOM else dict(self.catalog["model"][preset]),
            "training": self._stack_filled(self._section_values("training")),
            "cluster": cluster,
            "layout": layout,
        }

    def _stack_filled(self, values: dict[str, Any]) -> dict[str, Any]:
        """The training fields with the settings of the stack the page showed left out where the person chose
        another stack without changing them, so the chosen stack fills them as it would for the API."""
        chosen, shown = values.get("framework") or stacks.GENERIC, self.cleaned_data.get("stack_shown")
        if shown == chosen or shown not in stacks.FRAMEWORKS:
            return values
        was = _stack_option_defaults() | stacks.preset(shown)
        return {k: None if k in was and v == was[k] else v for k, v in values.items()}

    def _value(self, name: str) -> Any:
        value = self.cleaned_data.get(name)
        return None if value == "" else value

    def _section_values(self, prefix: str) -> dict[str, Any]:
        return {f.name: self._value(f"{prefix}__{f.name}") for f in SECTIONS[SECTION_OF[prefix]]}

    def _field_for(self, path: str) -> tuple[str | None, bool]:
        """(form field that shows an engine message about spec field `path`, whether it is that field)."""
        if path == "cluster.num_gpus":
            return "num_gpus", True
        if path in ("cluster.gpu", "cluster.node", "cluster.fabric"):
            return path.split(".")[1], False
        section, _, name = path.rpartition(".")
        prefix = PREFIX.get(section)
        if prefix is None or f"{prefix}__{name}" not in self.fields:
            return None, False
        selector = {"model": "model_preset", "gpu": "gpu", "node": "node", "fabric": "fabric"}.get(prefix)
        if selector and self.cleaned_data.get(selector) != CUSTOM:
            return selector, False  # the catalog row is at fault; its fields are not the ones being used
        return f"{prefix}__{name}", True


def _stack_option_defaults() -> dict[str, Any]:
    """The engine's default of each training option some stack sets: what "generic" shows in those fields."""
    return {f.name: f.default for f in SECTIONS["training"] if f.name in stacks.SET_BY_A_STACK}


def initial_for(catalog: Catalog, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Initial form values: the example (Llama 3 70B on 512 H100s) over the engine's defaults, or a saved plan's
    spec to edit a copy.

    Every field below a catalog dropdown starts with that row's values, so "custom" starts from them.
    """
    if spec is None:
        choices = {k: catalog_choice(catalog[_SECTION_OF.get(k, k)], v)
                   for k, v in EXAMPLE.items() if k in HARDWARE + ("model_preset",)}
        initial = engine_initial() | {k: v for k, v in EXAMPLE.items() if k not in choices}
        sections = {"model": catalog["model"].get(choices["model_preset"])}
        sections.update({hw: catalog[hw].get(choices[hw]) for hw in HARDWARE})
    else:
        cluster = spec.get("cluster", {})
        sections = {"model": spec.get("model")} | {hw: cluster.get(hw) for hw in HARDWARE}
        choices = {"model_preset": _catalog_match(catalog["model"], sections["model"])}
        choices.update({hw: _catalog_match(catalog[hw], sections[hw]) for hw in HARDWARE})
        initial = {"num_gpus": cluster.get("num_gpus")}
        initial.update({f"training__{k}": v for k, v in spec.get("training", {}).items()})
        initial.update({f"layout__{k}": _as_choice(v) for k, v in spec.get("layout", {}).items() if v is not None})
    for key, fields in sections.items():
        if fields is None:
            choices["model_preset" if key == "model" else key] = CUSTOM
            continue
        initial.update({f"{key}__{k}": _as_choice(v) if k in DERIVED_YES_NO else v
                        for k, v in fields.items() if v is not None})
    return initial | choices


_SECTION_OF = {"model_preset": "model"}


def catalog_choice(rows: Mapping[str, Any], preferred: str) -> str | None:
    """The catalog row a form starts on: `preferred` (the example's), else the first by name once an admin has
    renamed or deleted it, so that an untouched form is still a complete request; None for an empty table."""
    if preferred in rows:
        return preferred
    return min(rows, default=None)


def _catalog_match(table: dict[str, dict[str, Any]], fields: dict[str, Any] | None) -> str:
    """The catalog row a saved section came from, if it still has those values; otherwise "custom"."""
    if not fields:
        return CUSTOM
    row = table.get(fields.get("name", ""))
    if row is not None and all(fields.get(k) == v for k, v in row.items()):
        return row.get("name", fields["name"])
    return CUSTOM


# Yes/no fields whose default the engine derives: a choice of default, yes or no on the form (_form_field).
DERIVED_YES_NO = frozenset(f.name for section in ("model", "cluster.gpu", "cluster.node", "cluster.fabric")
                           for f in SECTIONS[section] if f.kind is bool and f.default is None)


def _as_choice(value: Any) -> Any:
    return {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
