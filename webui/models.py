"""The hardware catalog (GPU types, node types, fabrics, model presets) and the Plan a planner asks for.

Catalog columns carry the spec field names (planner/spec.py) plus `source`, so a row is a spec section as it
stands and fixtures/*.json load straight in. Bounds, units and help text are not repeated here: `clean()`
asks the engine, and the admin form reads the engine's field tables.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone

from planner import SpecError, parse_spec
from planner.catalog import spec_fields_of
from planner.spec import TOP, lone_surrogate, look_alike_key


class CatalogRow(models.Model):
    """A catalog entry: one spec section (`SECTION` in the engine's catalog) with a name and its source."""

    SECTION = ""  # "gpu" | "node" | "fabric" | "model"
    CATALOG_ONLY: tuple[str, ...] = ()  # columns besides the spec fields and `source`, which the engine never sees
    name = models.CharField(max_length=200, unique=True)
    source = models.TextField(blank=True, help_text="Where these figures come from (datasheet, paper, table).")

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def spec_fields(self) -> dict[str, Any]:
        """This row as the engine sees it: the spec fields only, empty ones left to the engine's defaults."""
        values = {f.attname: getattr(self, f.attname) for f in self._meta.concrete_fields}
        return spec_fields_of(self.SECTION, values)

    def full_clean(self, exclude=None, *args, **kwargs) -> None:
        # A form leaves out (exclude) the fields it could not read; clean() must not judge their stale values too.
        self._not_read = set(exclude or ())
        try:
            super().full_clean(exclude, *args, **kwargs)
        finally:
            del self._not_read

    def clean(self) -> None:
        if isinstance(self.name, str):
            # Spaces around a name are never meant, and a request's name is looked up stripped: "  H100 SXM5 80GB  "
            # stood beside the real row in the menus, and choosing it planned with the other row's figures.
            self.name = self.name.strip()
        errors = section_errors(self.SECTION, self.spec_fields())
        for f in self._meta.concrete_fields:  # PostgreSQL cannot store NUL in text, nor UTF-8 a lone surrogate
            text = str(getattr(self, f.attname) or "")
            if "\x00" in text:
                errors.setdefault(f.attname, []).append("must not contain NUL characters")
            if lone_surrogate(text) and f.attname not in errors:  # a name's is said already, by the engine
                errors.setdefault(f.attname, []).append("must be valid Unicode text (it holds a lone surrogate)")
        if twin := self._look_alike():
            errors.setdefault("name", []).append(
                f"{twin.name!r} is already a {self._meta.verbose_name}: names that differ only in case, spacing, "
                f"invisible characters or Unicode form would be mistaken for each other in menus and specs")
        for field, messages in self.row_errors().items():
            errors.setdefault(field, []).extend(messages)
        # A form leaves out the fields it could not read (full_clean's exclude): their stale values are not judged.
        errors = {k: v for k, v in errors.items() if k not in getattr(self, "_not_read", ())}
        if errors:
            raise ValidationError(errors)

    def row_errors(self) -> dict[str, list[str]]:
        """{field: [messages]} for rules of this table's own catalog-only columns, beside the engine's."""
        return {}

    def _look_alike(self) -> CatalogRow | None:
        """Another row of this table whose name reads as this one's (planner.spec.look_alike_key: "H100  SXM5
        80GB" with two spaces, or with a zero-width space, beside "H100 SXM5 80GB"); an exact twin is the unique
        constraint's to report. A catalog table holds tens of rows: each is compared."""
        if not isinstance(self.name, str) or not self.name:
            return None
        key = look_alike_key(self.name)
        others = type(self).objects.exclude(name=self.name).exclude(pk=self.pk).only("name")
        return next((row for row in others if look_alike_key(row.name) == key), None)


# A small, valid spec that each catalog row is dropped into, so the engine checks the row with the same
# rules and messages as a real request. Only errors about the row's own section are kept.
_PROBE: dict[str, Any] = {
    "model": {"name": "probe", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16},
    "training": {"global_batch": 8},
    "cluster": {
        "num_gpus": 1,
        "gpu": {"peak_tflops": 100, "memory_gib": 80, "memory_gbytes_per_s": 1000},
        "node": {"gpus": 1, "nvlink_gbytes_per_s": 100, "nics": 1, "nic_gbits_per_s": 100},
        "fabric": {},
    },
}
_SECTION_PATH = {"gpu": "cluster.gpu", "node": "cluster.node", "fabric": "cluster.fabric", "model": "model"}


def section_errors(section: str, fields: dict[str, Any]) -> dict[str, list[str]]:
    """{field name: [engine messages]} for one catalog row checked on its own."""
    spec = {**_PROBE, "cluster": dict(_PROBE["cluster"])}
    path = _SECTION_PATH[section]
    if section == "model":
        spec["model"] = fields
    else:
        spec["cluster"][section] = fields
        if section == "node" and isinstance(fields.get("gpus"), int):
            spec["cluster"]["num_gpus"] = fields["gpus"]
    try:
        parse_spec(spec)
    except SpecError as err:
        prefix = path + "."
        return {
            key.removeprefix(prefix): messages
            for key, messages in err.as_dict().items()
            if key.startswith(prefix)
        }
    return {}


PRICE_MAX = 10_000  # USD per GPU-hour: past any list price by far
PRICE_MIN = 0.0001  # USD per GPU-hour: a hundredth of a cent; 5e-324 made a sweep's costs 0.0 and a tie again


class GPUType(CatalogRow):
    SECTION = "gpu"
    CATALOG_ONLY = ("price_per_gpu_hour_usd",)
    peak_tflops = models.FloatField()
    memory_gib = models.FloatField()
    memory_gbytes_per_s = models.FloatField()
    fp8_tflops = models.FloatField(null=True, blank=True)
    bf16 = models.BooleanField(null=True, blank=True, verbose_name="BF16 tensor cores",
                               help_text="Empty: yes (Ampere and later). No for Volta (V100): it trains in fp16.")
    sm_count = models.PositiveIntegerField(default=132)
    # Catalog only, not a spec field: the engine never sees it. Sweeps read it for a scenario's cost (goal-seeking).
    price_per_gpu_hour_usd = models.FloatField(
        null=True, blank=True,  # PRICE_MIN to PRICE_MAX: row_errors, in the engine's words
        verbose_name="price per GPU-hour (USD)",
        help_text="Optional: what one GPU-hour costs you, for sweeps' cost and budget. Say where it comes from "
                  "(and when) in the source notes. Empty: sweeps rank by GPU-hours.")
    # Achievable-throughput constants (planner/spec.py GPU_FIELDS has their bounds and help); `source` says
    # where each row's values come from.
    gemm_efficiency = models.FloatField(default=0.80)
    fp8_gemm_efficiency = models.FloatField(default=0.72)
    sustained_clock = models.FloatField(default=1.0)
    hbm_efficiency = models.FloatField(default=0.85)
    kernel_overhead_us = models.FloatField(default=4.0)
    attention_efficiency = models.FloatField(default=0.55)
    cudnn_attention_efficiency = models.FloatField(null=True, blank=True)

    class Meta(CatalogRow.Meta):
        verbose_name = "GPU type"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A renamed GPU type stays held by the node types that held it under its old name."""
        old = GPUType.objects.filter(pk=self.pk).values_list("name", flat=True).first() if self.pk else None
        super().save(*args, **kwargs)
        if old is not None and old != self.name:
            _rename_held(old, self.name)

    def row_errors(self) -> dict[str, list[str]]:
        # A price of 0 would make every scenario on this GPU free, and a sweep's cheapest pick a tie.
        price = self.price_per_gpu_hour_usd  # full_clean runs this after a field's own error too ("abc")
        if not isinstance(price, (int, float)) or isinstance(price, bool):
            return {}
        if price > PRICE_MAX:
            # Django's "Ensure this value is less than or equal to 10000." where every other message says "must"
            return {"price_per_gpu_hour_usd": [f"must be at most {PRICE_MAX:,} USD a GPU-hour (got {price:g})"]}
        if price <= 0:  # -1 said ">= 0" too
            return {"price_per_gpu_hour_usd": ["must be more than 0: leave it empty when you have no price"]}
        if price < PRICE_MIN:
            return {"price_per_gpu_hour_usd": [f"must be at least {PRICE_MIN:g} USD a GPU-hour (got {price:g}): "
                                               "leave it empty when you have no price"]}
        return {}


def _rename_held(old: str, new: str | None) -> None:
    """Name GPU type `old` as `new` in every node type's GPU types, or, with None, take it out."""
    for node in NodeType.objects.filter(gpu_types__contains=old):
        names = node.held_gpus()
        if old in names:
            node.gpu_types = "\n".join(n for n in ((new if n == old else n) for n in names) if n is not None)
            node.save(update_fields=["gpu_types"])


@receiver(post_delete, sender="webui.GPUType")
def _gpu_deleted(sender: Any, instance: GPUType, **kwargs: Any) -> None:
    """A deleted GPU type leaves the node types that held it: its name left there refused every later save of the
    node ("not a GPU type of the catalog") and was still listed by /api/catalog."""
    _rename_held(instance.name, None)


class NodeType(CatalogRow):
    SECTION = "node"
    CATALOG_ONLY = ("gpu_types",)
    gpus = models.PositiveIntegerField()
    nvlink_domain_gpus = models.PositiveIntegerField(null=True, blank=True)
    nvlink_gbytes_per_s = models.FloatField()
    nics = models.PositiveIntegerField()
    nic_gbits_per_s = models.FloatField()
    nvlink_sharp = models.BooleanField(default=False)
    host_gbytes_per_s = models.FloatField(default=128.0)
    # Catalog only, not a spec field: a plan may put any GPU in any node (a what-if). Sweeps read it to leave out
    # a GPU in a node type not built for it ("B200 in a DGX H100"), where asked to leave out what cannot run.
    gpu_types = models.TextField(
        blank=True, verbose_name="GPU types it holds",
        help_text="The catalog's GPU types this node is built with, one name a line. A sweep asked to leave out "
                  "combinations that cannot run leaves out any other GPU in this node. Empty: any GPU.")

    class Meta(CatalogRow.Meta):
        verbose_name = "node type"

    def held_gpus(self) -> list[str]:
        """The GPU types' names this node holds; empty for any."""
        return held_gpus(self.gpu_types)

    def row_errors(self) -> dict[str, list[str]]:
        if not isinstance(self.gpu_types, str):
            return {}  # said as "must be text" where it is read
        names = self.held_gpus()
        known = set(GPUType.objects.filter(name__in=names).values_list("name", flat=True))
        unknown = [n for n in names if n not in known]
        twice = sorted({n for n in names if names.count(n) > 1})
        problems = ([f"{', '.join(map(repr, unknown[:5]))} {'is' if len(unknown) == 1 else 'are'} not a GPU type "
                     f"of the catalog (one name a line, as the GPU types list writes it)"] if unknown else [])
        problems += [f"names {', '.join(map(repr, twice))} twice"] if twice else []
        return {"gpu_types": problems} if problems else {}


def held_gpus(text: Any) -> list[str]:
    """A node type's `gpu_types` text as names, one a line, blank lines and spaces around a name dropped."""
    return [line.strip() for line in text.splitlines() if line.strip()] if isinstance(text, str) else []


class Fabric(CatalogRow):
    SECTION = "fabric"
    topology = models.CharField(max_length=32, default="fat_tree")
    kind = models.CharField(max_length=32, default="infiniband")
    latency_us = models.FloatField(default=1.0)
    oversubscription = models.FloatField(default=1.0)
    link_gbits_per_s = models.FloatField(null=True, blank=True)
    switch_radix = models.PositiveIntegerField(default=64)
    pod_gpus = models.PositiveIntegerField(null=True, blank=True)
    pod_oversubscription = models.FloatField(default=1.0)
    group_gpus = models.PositiveIntegerField(null=True, blank=True)


class ModelPreset(CatalogRow):
    SECTION = "model"
    layers = models.PositiveIntegerField()
    hidden = models.PositiveIntegerField()
    heads = models.PositiveIntegerField()
    kv_heads = models.PositiveIntegerField(null=True, blank=True)
    ffn_hidden = models.PositiveIntegerField(null=True, blank=True)
    gated_mlp = models.BooleanField(default=False)
    vocab = models.PositiveIntegerField()
    seq_len = models.PositiveIntegerField()
    experts = models.PositiveIntegerField(default=1)
    top_k = models.PositiveIntegerField(default=1)
    router_groups = models.PositiveIntegerField(default=1)  # group-limited routing (DeepSeek-V3: 8 groups, ...
    router_group_top_k = models.PositiveIntegerField(null=True, blank=True)  # ... 4 per token); empty: all groups
    expert_ffn_hidden = models.PositiveIntegerField(null=True, blank=True)
    shared_experts = models.PositiveIntegerField(default=0)
    dense_layers = models.PositiveIntegerField(default=0)
    tied_embeddings = models.BooleanField(default=False)
    dropout = models.BooleanField(null=True, blank=True)  # empty: the engine's default (on for GPT-style models)
    residual_streams = models.PositiveIntegerField(default=1)  # hyper-connections (DeepSeek-V4's mHC: 4)


CATALOG_MODELS: dict[str, type[CatalogRow]] = {
    "gpu": GPUType, "node": NodeType, "fabric": Fabric, "model": ModelPreset,
}


class SeededRow(models.Model):
    """A shipped catalog row (fixtures/*.json) that `catalog seed` has put in, or found, here once. Seeding adds only
    shipped rows it has never seen, so a row an admin deleted or renamed stays so; `catalog seed --restore` puts
    them back."""

    section = models.CharField(max_length=8, help_text='"gpu" | "node" | "fabric" | "model"')
    name = models.CharField(max_length=200, help_text="The row's name as shipped.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["section", "name"], name="seeded_row_once")]

    def __str__(self) -> str:
        return f"{self.section}: {self.name}"


# Past 2**53 a JSON integer is no longer exact in a double, nor safe in JavaScript or most typed JSON readers.
EXACT_INT = 2 ** 53


def _json_int(text: str) -> int | float:
    number = int(text)
    return number if abs(number) <= EXACT_INT else float(number)


class SavedJSONDecoder(json.JSONDecoder):
    """Reads a saved spec or answer as the engine wrote it. PostgreSQL's jsonb keeps numbers as decimals and gives
    a float the engine wrote as 3.855525483726766e+19 back as the integer 38555254837267660000, which the JSON
    API then sent on, past any 64-bit integer; SQLite gave the float. An integer too large to be exact is a float
    again (the engine writes none: its counts are far smaller)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parse_int", _json_int)
        super().__init__(*args, **kwargs)


class Plan(models.Model):
    """One planning request and its answer. Shared by its UUID `code`; once done, it never changes."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    spec = models.JSONField(decoder=SavedJSONDecoder,
                            help_text="The canonical spec: every default filled in, catalog names expanded.")
    spec_hash = models.CharField(max_length=64, db_index=True,
                                 help_text="sha256 of the canonical spec JSON and the engine version.")
    top = models.PositiveSmallIntegerField(default=TOP.default, help_text="How many ranked layouts to keep.")
    # The canonical spec cannot tell a stated value from a filled-in default, so the request's own say is kept.
    option_sources = models.JSONField(
        default=dict, blank=True,
        help_text='{spec path: "request" | "catalog" | "default"} for each modelling option (webui/options.py): '
                  "set in the request, or assumed. Empty for plans saved before it was kept.")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED, db_index=True)
    result = models.JSONField(null=True, blank=True, decoder=SavedJSONDecoder)
    error = models.TextField(blank=True)
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reuses",
        help_text="The earlier plan with the same spec whose answer this one reuses (no new search).")
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Searches started (a lost worker's counts).")
    time_limit_s = models.FloatField(default=120, help_text="Soft time limit of the search, sized from the spec.")
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When the task was last handed to the broker; empty: not yet (outbox).")
    lease_token = models.UUIDField(null=True, blank=True, editable=False,
                                   help_text="The running search's claim; only its holder may store the answer.")
    lease_expires_at = models.DateTimeField(null=True, blank=True, help_text="After this, the search is presumed lost.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("plan-detail", args=[self.code])

    @property
    def title(self) -> str:
        return " ".join(self.title_parts)

    @property
    def title_parts(self) -> list[str]:
        """The title in its parts, which compare's chart labels drop whole where every plan shares them: "Llama 3
        70B on", "512 ×", "H100 SXM5 80GB" (dropping shared words cut "Llama 3.1 405B" to "3.1 405B")."""
        model = (self.spec or {}).get("model", {})
        cluster = (self.spec or {}).get("cluster", {})
        gpu = cluster.get("gpu", {}).get("name", "GPUs")
        gpus = cluster.get("num_gpus", "?")
        return [f"{model.get('name', 'model')} on", f"{f'{gpus:,}' if isinstance(gpus, int) else gpus} ×", gpu]

    @property
    def is_pending(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)

    @property
    def is_waiting_for_broker(self) -> bool:
        """Saved but not yet handed to the broker (it was down): the outbox sends it once it is back."""
        return self.status == self.Status.QUEUED and self.dispatched_at is None

    @property
    def was_cut_off(self) -> bool:
        """An earlier search of this plan stopped with its process (queued again after one, or running again): the
        plan page's note, and the API's `cut_off`, which plan.js polls."""
        return (self.status == self.Status.QUEUED and self.attempts > 0) or self.attempts > 1

    @property
    def run_time(self) -> timedelta | None:
        if self.started_at and self.finished_at:
            return self.finished_at - self.started_at
        return None

    def waited(self, now: datetime | None = None) -> timedelta:
        return (now or timezone.now()) - self.created_at


class Sweep(models.Model):
    """A base spec and axes of values; each scenario of their product is an ordinary Plan (SweepScenario).
    Its progress is read from those plans' statuses, so it cannot go stale, and it never changes once made."""

    code = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    base = models.JSONField(help_text="The base spec, as submitted.")
    vary = models.JSONField(help_text="{dotted spec path: [values, ...]}, as submitted.")
    # PostgreSQL's jsonb does not keep an object's key order, and the axes' order is the table's and the charts'.
    axes = models.JSONField(default=list, help_text="The paths of `vary`, in the order given.")
    goal = models.JSONField(null=True, blank=True, help_text='{"tokens", "deadline_days", "budget"} or empty.')
    top = models.PositiveSmallIntegerField(default=TOP.default, help_text="Ranked layouts kept by each scenario's plan.")
    client = models.CharField(max_length=64, blank=True, db_index=True,
                              help_text="Who asked (an address): sweeps of one client share a quota of scenarios "
                                        "waiting or running (settings.SWEEP_MAX_PENDING_PER_CLIENT).")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    left_out = models.JSONField(default=list, blank=True,
                                help_text='Combinations that cannot run, left out as asked ("leave_out_invalid"): '
                                          '[{"values", "reasons"}].')

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("sweep-detail", args=[self.code])

    @property
    def title(self) -> str:
        axes = ", ".join(self.axes)
        if "model" in self.axes:  # the base's model (if any) is not what the sweep trains
            return f"Sweep over {axes}"
        model = self.base.get("model") if isinstance(self.base, dict) else None
        name = model if isinstance(model, str) else (model or {}).get("name", "model")
        return f"Sweep of {name} over {axes}"


class SweepScenario(models.Model):
    """One scenario of a sweep: its values on each axis and the plan that answers it."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="scenarios")
    position = models.PositiveIntegerField()
    values = models.JSONField(help_text="{path: value} on each axis.")
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="sweep_scenarios")
    price_per_gpu_hour_usd = models.FloatField(
        null=True, blank=True, help_text="The GPU's catalog price when the sweep was made (a sweep never changes).")

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["sweep", "position"], name="sweep_scenario_position")]

    def __str__(self) -> str:  # the admin's "Cannot delete plan" page listed "SweepScenario object (201)"
        return f"scenario {self.position + 1} of sweep {self.sweep.code}"
