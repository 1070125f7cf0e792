"""Business logic of the web app: the catalog as the engine sees it, and a plan's lifecycle.

Views, the admin, the API, management commands and the Celery task all come here; none of them talks to the
engine or changes a Plan's status directly. Functions are `<entity>_<action>` with keyword-only arguments.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core import serializers
from django.core.exceptions import ValidationError
from django.db import DatabaseError, InterfaceError, OperationalError, connection, models, transaction
from django.utils import timezone

import planner
from planner import PlanSpec, SpecError, accuracy, parse_spec, stacks, units
from planner.catalog import FIXTURES_DIR, Catalog
from planner.constants import ENGINE_VERSION
from planner.spec import TOP, as_number, describe_value, look_alike_key, not_a_number, text_problem
from planner.launch import launch_configs

from . import delivery, options
from .models import CATALOG_MODELS, CatalogRow, NodeType, Plan, SeededRow, held_gpus, section_errors
from .templatetags.planner_format import by_count

logger = logging.getLogger(__name__)

_LABELS = {f"webui.{model._meta.model_name}": model for model in CATALOG_MODELS.values()}


# ---------------------------------------------------------------------------------------------------------
# Catalog


def catalog_as_dict() -> Catalog:
    """{"gpu"|"node"|"fabric"|"model": {name: spec fields}}: the catalog in the shape `parse_spec` takes."""
    return {
        section: {row.name: row.spec_fields() for row in model.objects.all()}
        for section, model in CATALOG_MODELS.items()
    }


def catalog_for_api() -> dict[str, Any]:
    """GET /api/catalog: the catalog as spec fields (each row can stand in a spec as it is), and beside it, under
    "catalog_only", the columns a spec has no field for: each GPU's price per GPU-hour (where set), each node's
    GPU types (empty: any GPU)."""
    extra: dict[str, dict[str, dict[str, Any]]] = {}
    for section, model in CATALOG_MODELS.items():
        for row in model.objects.all():
            values = {key: getattr(row, key) for key in model.CATALOG_ONLY if getattr(row, key) not in (None, "")}
            if section == "node":  # every node's, empty for any GPU: told apart from a node not listed
                values["gpu_types"] = row.held_gpus()
            if values:
                extra.setdefault(section, {})[row.name] = values
    return {**catalog_as_dict(), "catalog_only": extra}


def catalog_export(*, rows: Iterable[CatalogRow] | None = None) -> list[dict[str, Any]]:
    """Catalog rows in Django fixture format (the format of fixtures/*.json); all rows unless given."""
    if rows is None:
        rows = [row for model in CATALOG_MODELS.values() for row in model.objects.order_by("pk")]
    return serializers.serialize("python", rows)


def catalog_import(*, rows: Any, update_existing: bool = True) -> dict[str, int]:
    """Load fixture-format rows, matched by name (not by pk, which differs between databases).

    All or nothing: every row is checked with the engine's rules first; any problem raises one
    ValidationError listing each bad row by position and name. Returns {"created", "updated", "unchanged"}.
    """
    if not isinstance(rows, list):
        raise ValidationError("The file must hold a JSON list of catalog rows, as fixtures/*.json do.")
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    problems: list[str] = []
    first_of: dict[tuple[str, str], int] = {}
    with transaction.atomic():
        for index, row in enumerate(rows, start=1):
            if isinstance(row, dict) and isinstance(row.get("fields"), dict):
                # Names as they read: " ImpGPU " (stored stripped) or "IMPGPU" beside "ImpGPU", where the later
                # row would silently win, or stand beside the first as its look-alike.
                name = str(row["fields"].get("name"))
                key = (str(row.get("model", "")).lower(), look_alike_key(name))
                if key in first_of:
                    problems.append(f"row {index} ({name.strip()}): repeats the name of row {first_of[key]}")
                    continue
                first_of[key] = index
            try:
                outcome = _catalog_row_load(row, update_existing=update_existing)
            except ValidationError as err:
                fields = row.get("fields") if isinstance(row, dict) else None
                name = fields.get("name", "?") if isinstance(fields, dict) else "?"
                problems.extend(f"row {index} ({name}): {m}" for m in _messages(err))
                continue
            counts[outcome] += 1
        if problems:
            transaction.set_rollback(True)
            raise ValidationError(problems)
    return counts


def _catalog_row_load(row: Any, *, update_existing: bool) -> str:
    if not isinstance(row, dict) or not isinstance(row.get("fields"), dict):
        raise ValidationError('must be an object with "model" and "fields"')
    model = _LABELS.get(str(row.get("model", "")).lower())
    if model is None:
        raise ValidationError(f"unknown model {row.get('model')!r} (known: {', '.join(sorted(_LABELS))})")
    fields = dict(row["fields"])
    known = {f.name for f in model._meta.concrete_fields} - {"id"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValidationError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    # A null where the column takes none: full_clean skips a field that may be blank ("source"), and the INSERT
    # then failed (a 500 in the admin, a traceback from the command).
    nulls = {key: ["must not be null (leave the field out for its default)"] for key, value in fields.items()
             if value is None and not model._meta.get_field(key).null}
    if nulls:
        raise ValidationError(nulls)
    # Types the engine's field tables do not judge: text columns take text ("source": ["a"] was stored as the
    # text "['a']"), and a catalog-only number a number ("price": "abc" raised TypeError, true was stored as 1.0).
    wrong = {}
    for key, value in fields.items():
        column = model._meta.get_field(key)
        if value is None:
            continue
        if isinstance(column, (models.CharField, models.TextField)) and not isinstance(value, str):
            wrong[key] = [f"must be text, not {describe_value(value)}"]
        elif key in model.CATALOG_ONLY and isinstance(column, models.FloatField) and (
                isinstance(value, bool) or as_number(value) is None):
            wrong[key] = [not_a_number(value)]
    if wrong:
        raise ValidationError(wrong)
    name = fields.get("name")
    if isinstance(name, str):  # as CatalogRow.clean stores it: a padded name updates the row of that name
        name = fields["name"] = name.strip()
    problem = text_problem(name) if isinstance(name, str) else None
    if problem:  # nor can a query hold it (NUL, a lone surrogate)
        raise ValidationError({"name": [problem]})
    instance = model.objects.filter(name=name).first() if isinstance(name, str) else None
    if instance is not None and not update_existing:
        return "unchanged"
    created = instance is None
    instance = instance or model()
    before = {k: getattr(instance, k) for k in fields} if not created else None
    for key, value in fields.items():
        setattr(instance, key, value)
    # The engine's rules first, on the values as the file gives them: Django's own cleaning would turn 1.5 into
    # 1 for a whole-number field, and repeat "is required" in its own words.
    errors = section_errors(model.SECTION, instance.spec_fields())
    if errors:
        raise ValidationError(errors)
    instance.full_clean()
    if not created and before == {k: getattr(instance, k) for k in fields}:
        return "unchanged"
    instance.save()
    return "created" if created else "updated"


def _messages(err: ValidationError) -> list[str]:
    if hasattr(err, "error_dict"):
        return [f"{field}: {m}" for field, ms in err.message_dict.items() for m in ms]
    return list(err.messages)


# The advisory lock key of `catalog seed` (any 64-bit number no other lock of this app uses)
SEED_LOCK = int.from_bytes(hashlib.sha256(b"catalog seed").digest()[:8], "big", signed=True)


def _rehold(rows: list[Any], restored: set[str]) -> None:
    """GPU types `restored` by a seed go back into the node types the shipped rows say hold them: deleting a GPU
    type took it out of them (models._gpu_deleted), and `seed --restore` brought the GPU back alone."""
    for row in rows:
        fields = row.get("fields") if isinstance(row, dict) and row.get("model") == "webui.nodetype" else None
        shipped = held_gpus((fields or {}).get("gpu_types"))
        back = [name for name in shipped if name in restored]
        node = NodeType.objects.filter(name=(fields or {}).get("name")).first() if back else None
        if node is not None and (missing := [name for name in back if name not in node.held_gpus()]):
            node.gpu_types = "\n".join(node.held_gpus() + missing)
            node.save(update_fields=["gpu_types"])


def catalog_seed(*, directory: Path | None = None, restore: bool = False) -> dict[str, int]:
    """Add the shipped catalog (fixtures/*.json) to the database, leaving rows someone edited alone.

    A shipped row is added once (SeededRow): one an admin has since deleted or renamed is not brought back by the
    next seed (`make run` seeds at every start), unless `restore`. Returns {"created", "updated", "unchanged",
    "withheld"}: "withheld" counts the shipped rows left out because they were removed here."""
    rows: list[Any] = []
    for path in sorted(Path(directory or FIXTURES_DIR).glob("*.json")):
        rows.extend(json.loads(path.read_text()))
    def key(row: Any) -> tuple[str, str] | None:
        if isinstance(row, dict) and isinstance(row.get("fields"), dict):
            model = _LABELS.get(str(row.get("model", "")).lower())
            if model is not None and isinstance(row["fields"].get("name"), str):
                return model.SECTION, row["fields"]["name"]
        return None  # catalog_import names what is wrong with it

    with transaction.atomic():
        # One seed at a time: two `make run`s starting on one new database both added the rows, and the second
        # stopped with an IntegrityError traceback. PostgreSQL: a transaction advisory lock; SQLite: its
        # transactions are IMMEDIATE (settings.DATABASES), which hold the one write lock from their start.
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEED_LOCK])
        seen = set(SeededRow.objects.values_list("section", "name"))
        removed = seen - {(section, name) for section, model in CATALOG_MODELS.items()
                          for name in model.objects.values_list("name", flat=True)}
        fresh = [row for row in rows if restore or key(row) not in removed]
        counts = catalog_import(rows=fresh, update_existing=False)
        if restore:
            _rehold(rows, {name for section, name in removed if section == "gpu"})
        SeededRow.objects.bulk_create([SeededRow(section=k[0], name=k[1]) for k in map(key, fresh)
                                       if k is not None and k not in seen], ignore_conflicts=True)
    return counts | {"withheld": len(rows) - len(fresh)}


# ---------------------------------------------------------------------------------------------------------
# Plans


class CatalogTable(Mapping[str, dict[str, Any]]):
    """One catalog section read by name on demand: a spec names at most one row of each, so the JSON API looks
    up those rows instead of loading the whole catalog for every request. Iterating lists the names (for an
    "unknown catalog name" message)."""

    def __init__(self, model: type[CatalogRow]) -> None:
        self.model = model
        self.rows: dict[str, dict[str, Any] | None] = {}

    def get(self, name: Any, default: Any = None) -> Any:
        if name not in self.rows:
            # No row's name holds NUL or a lone surrogate (CatalogRow.clean refuses them), and neither can go into a
            # query (PostgreSQL refuses NUL, UTF-8 the surrogate): such a name is simply unknown.
            row = self.model.objects.filter(name=name).first() if isinstance(name, str) and not text_problem(name) \
                else None
            self.rows[name] = row.spec_fields() if row else None
        found = self.rows[name]
        return default if found is None else found

    def __getitem__(self, name: str) -> dict[str, Any]:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.model.objects.order_by("name").values_list("name", flat=True))

    def __len__(self) -> int:
        return self.model.objects.count()

    def __bool__(self) -> bool:  # `table or {}` must not count the rows
        return True


def spec_parse(*, data: Any, catalog: Catalog | None = None) -> PlanSpec:
    """Validate a spec document against the database catalog (all of it when given, else the rows it names).
    Raises SpecError naming each bad field."""
    if catalog is None:
        catalog = {section: CatalogTable(model) for section, model in CATALOG_MODELS.items()}
    # parse_spec refuses control characters in every text field (PostgreSQL's jsonb refuses NUL).
    return parse_spec(data, catalog)


def spec_hash(spec: dict[str, Any]) -> str:
    """sha256 of the canonical spec and the engine: its version and its build (accuracy.fingerprint, over the
    engine's code and data), so identical requests to the same engine hash alike and an answer is reused only by
    the engine that wrote it, even where a change of the answer's contents (a chart's data) kept the version."""
    text = json.dumps({"engine": ENGINE_VERSION, "build": accuracy.fingerprint(), "spec": spec}, sort_keys=True,
                      separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def spec_option_sources(*, data: Any, catalog: Catalog | None = None) -> dict[str, str]:
    """{path: "request" | "catalog" | "default"} for each modelling option of a request `spec_parse` accepted."""
    if catalog is None:
        catalog = {section: CatalogTable(model) for section, model in CATALOG_MODELS.items()}
    return options.option_sources(data=data, catalog=catalog)


def plan_create(*, spec: PlanSpec, top: int = TOP.default, sources: dict[str, str] | None = None) -> Plan:
    """A new plan for this spec, with its own code. When the same request (spec, engine version, `top`) has
    an answer already, the new plan reuses it at once, with a link to the original, and no search runs.
    Otherwise it is saved queued and its task sent once the row is committed (the worker must see it).
    `sources` (`spec_option_sources`) says which modelling options the request set; not part of the hash, as
    the engine reads the same spec either way."""
    canonical = spec.to_dict()
    sources = sources or {}
    digest = spec_hash(canonical)
    original = plan_original(spec_hash=digest, top=top)
    if original is not None:
        now = timezone.now()
        # One instant for all three: created_at's own default, read a moment later, fell after the other two.
        return Plan.objects.create(spec=canonical, spec_hash=digest, top=top, option_sources=sources,
                                   status=Plan.Status.DONE, result=original.result, reused_from=original,
                                   time_limit_s=original.time_limit_s, created_at=now, started_at=now,
                                   finished_at=now)
    with transaction.atomic():
        # Stamped as sent already, so the outbox sweep leaves it to this request; a broker that refuses the task
        # clears the stamp (logged, not a 500) and the sweep sends it later. Should this process die in between,
        # the sweep sends it again after PLAN_RESEND_AFTER_S.
        plan = Plan.objects.create(spec=canonical, spec_hash=digest, top=top, option_sources=sources,
                                   dispatched_at=timezone.now(), time_limit_s=delivery.plan_time_limit(spec=spec))
        transaction.on_commit(partial(delivery.plan_send, plan=plan), robust=True)
    return plan


def plan_original(*, spec_hash: str, top: int) -> Plan | None:
    """The earliest finished plan that searched this request itself (not one that reused another's answer)."""
    return (Plan.objects.filter(spec_hash=spec_hash, top=top, status=Plan.Status.DONE, reused_from__isnull=True)
            .order_by("finished_at").first())


def plan_run(*, plan_id: int, holder: str | None = None) -> Plan | None:
    """Run the engine's search for a queued plan and record the outcome, once however often it is delivered.

    Only the caller that claims the plan (queued -> running under a lease named for `holder`, see
    `delivery.lease_holder`) searches; any other delivery returns the plan as it is. An identical request
    finished meanwhile lends its answer instead of a search. A process stopped on the way (SystemExit or
    KeyboardInterrupt: a worker's cold shutdown, webui/tasks.py) gives the plan back before it exits.
    """
    token = delivery.lease_token(holder)  # known before the claim, so that a stop during the claim gives it back
    try:
        return _plan_run(plan_id=plan_id, token=token)
    except (SystemExit, KeyboardInterrupt):
        try:
            outcome = delivery.plan_stopped(plan_id=plan_id, token=token)
            logger.warning("plan %s: stopped mid-search: %s", plan_id,
                           outcome or "nothing to give back (not claimed yet, or its answer stored)")
        except DatabaseError:  # the lease lapses and the sweep recovers the plan
            logger.exception("plan %s: stopped mid-search; could not give it back, its lease will lapse", plan_id)
        raise


def _plan_run(*, plan_id: int, token: uuid.UUID) -> Plan | None:
    plan, claimed = delivery.plan_claim(plan_id=plan_id, token=token)
    if plan is None:
        logger.warning("plan %s does not exist; nothing to run", plan_id)
        return None
    if claimed is None:  # finished, or running under another delivery's live lease: this one is a duplicate
        logger.info("plan %s is %s: this delivery has nothing to do", plan.pk, plan.status)
        return plan
    try:
        original = plan_original(spec_hash=plan.spec_hash, top=plan.top)
        if original is not None:
            return delivery.plan_store(plan=plan, token=token, status=Plan.Status.DONE, result=original.result,
                                       reused_from=original, error="")
        return delivery.plan_store(plan=plan, token=token, **_plan_search(plan))
    except (OperationalError, InterfaceError):  # the database blinked: give the plan back; the task retries
        delivery.plan_release(plan=plan, token=token)
        raise


def _plan_search(plan: Plan) -> dict[str, Any]:
    """The fields that record the engine's outcome: done with the answer, or failed with a message."""
    failed = Plan.Status.FAILED
    try:
        result = _json_native(planner.plan(parse_spec(plan.spec), top=plan.top))
    except SpecError as err:
        return {"status": failed, "error": f"The saved spec is not valid for this engine version: {err}"}
    except SoftTimeLimitExceeded:
        return {"status": failed, "error": f"The search took longer than {plan.time_limit_s:g} s and was stopped. "
                                          "Pin part of the layout (TP, PP) to make the search smaller."}
    except MemoryError:
        return {"status": failed, "error": f"The search needed more than the {settings.PLAN_MEMORY_LIMIT_MB} MiB "
                                          "a worker allows. Pin part of the layout (TP, PP) to make it smaller."}
    except Exception as err:  # the engine failing must give a failed plan with a message, not a lost one
        logger.exception("plan %s: the engine failed", plan.code)
        return {"status": failed, "error": f"The engine failed: {type(err).__name__}: {err}"[:4000]}
    return {"status": Plan.Status.DONE, "result": result, "error": ""}


def _json_native(value: Any) -> Any:
    """The answer as plain JSON: non-finite floats become null (PostgreSQL's jsonb refuses NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_native(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # a numpy scalar slipped through: take its Python value
        return _json_native(value.item())
    raise TypeError(f"the engine's answer holds a {type(value).__name__}, which is not JSON")


def plan_retry(*, plan: Plan) -> Plan:
    """Try a failed plan again as a new plan with the same spec; the failed one stays as it was."""
    if plan.status != Plan.Status.FAILED:
        return plan
    return plan_create(spec=parse_spec(plan.spec), top=plan.top, sources=plan.option_sources)


# What helps when no layout fits, by the commonest reason the layouts were rejected for (the engine's reason keys,
# planner/search.py); any other reason gets the general advice. First the reasons of the request itself...
_REQUEST_ADVICE = {
    "out_of_memory": "GPUs with more memory, more GPUs, a smaller global batch or a shorter sequence",
    "dp_does_not_divide_batch": "a larger global batch (a multiple of the data-parallel degrees the GPU count "
                                "allows) or fewer GPUs",
    "micro_batch_does_not_divide": "a global batch with more factors, so that a micro-batch divides each replica's share",
    "pp_exceeds_layers": "fewer GPUs, or a model with more layers",
    "tp_crosses_nvlink_domain": "a tensor-parallel size that divides the NVLink domain's GPUs (fewer GPUs for each "
                                "tensor-parallel group), or a node with a larger NVLink domain",
    "tp_does_not_divide_heads": "a model whose attention and KV heads the tensor-parallel degree divides",
}
# ... then those a pinned layout field causes, the advice being about the pins; without pins they are the search
# trimming its own candidates.
_PIN_ADVICE = {
    "moe_tp_needs_sp": "sequence parallelism on (an MoE model with TP > 1 needs it), or TP 1",
    "zero_with_pipeline": "ZeRO 0 or 1 with pipeline parallelism, or PP 1 with ZeRO 2 or 3",
    "not_the_pinned_dp": "pins of TP, PP, CP and DP whose product is the GPU count, or fewer of them pinned",
    "vpp_needs_microbatches": "fewer virtual stages, a smaller micro-batch or a larger global batch, so that each "
                              "step has at least PP micro-batches",
    "vpp_invalid": "fewer virtual stages, so that each holds a layer, or fewer pipeline stages",
    "ep_invalid": "an expert-parallel degree that divides the experts and the ranks of a stage",
    "ep_not_dividing_ranks": "an expert-parallel degree that divides the ranks of a stage",
    "ep_across_pipeline_stages": "another rank order, or an expert-parallel degree within a pipeline stage",
    "gpus_not_divisible": "a GPU count with more factors, or pins that divide it",
    "cp_does_not_split_sequence": "fewer GPUs, or a sequence that splits into twice as many chunks as the "
                                  "context-parallel degree",
    "cp_needs_flash_attention": "a fused attention kernel (flash, cuDNN or Transformer Engine's) for context "
                                "parallelism, or CP 1",
    "sp_needs_tp": "sequence parallelism off, or TP 2 or more",
}
NO_LAYOUT_ADVICE = {**_REQUEST_ADVICE, **_PIN_ADVICE}
PIN_REASONS = frozenset(_PIN_ADVICE)
GENERAL_ADVICE = "more GPUs, GPUs with more memory, a smaller global batch or a shorter sequence"


def plan_peak_note(*, plan: Plan) -> str:
    """What MFU is measured against, "of the FP8 peak, 1,979 TFLOP/s a GPU": an FP8 plan's MFU beside a BF16
    plan's reads as worse though it is faster. Empty for answers saved before the engine gave the peak."""
    peak = ((plan.result or {}).get("model") or {}).get("utilization_peak_tflops")
    if not isinstance(peak, (int, float)):
        return ""
    precision = (plan.spec.get("training") or {}).get("precision")
    name = "FP8" if precision == "fp8" else "dense 16-bit"
    # Model FLOPs count attention whole (planner/model.py: model_flops_per_step, PaLM's convention, as Megatron's
    # and llm-foundry's): at 128K tokens a causal model's MFU reads above what its GEMMs could reach.
    return (f"of the {name} peak, {peak:,.0f} TFLOP/s a GPU; attention counted without the causal half, as PaLM "
            "counts it")


def plan_no_layout_advice(*, result: Any) -> str:
    """What usually helps a request none of whose layouts fits, from its commonest rejection; with a pinned layout,
    leaving the pins to the search too (a request that pinned every field was told only of memory and GPUs)."""
    ranked = by_count(result.get("rejected")) if isinstance(result, dict) else []
    pinned = ((result.get("spec") or {}).get("layout") or {}) if isinstance(result, dict) else {}
    pins = [key for key, value in pinned.items() if value is not None] if isinstance(pinned, dict) else []
    if not pins:
        # Without pins those reasons are the search trimming its own candidates (ZeRO-3 beside PP, say), which
        # outnumber the real ones: 405B on 64 GPUs was told of ZeRO and PP, not of its 15,588 layouts out of memory.
        ranked = [(reason, n) for reason, n in ranked if reason not in PIN_REASONS]
    advice = NO_LAYOUT_ADVICE.get(ranked[0][0], GENERAL_ADVICE) if ranked else GENERAL_ADVICE
    if pins:
        advice += f"; or leave the pinned {', '.join(pins)} to the search"
    return advice


def _rejections_by_count(result: dict[str, Any]) -> dict[str, Any]:
    """The answer's rejection counts and examples, most common first as the engine gives them (and as the plan
    page lists them, `by_count`): PostgreSQL's jsonb keeps an object's keys in an order of its own."""
    counts = result.get("rejected")
    if not isinstance(counts, dict):
        return {}
    order = [k for k, _ in by_count(counts)]
    out: dict[str, Any] = {"rejected": {k: counts[k] for k in order}}
    examples = result.get("rejected_examples")
    if isinstance(examples, dict):
        out["rejected_examples"] = {k: examples[k] for k in order if k in examples} | examples
    return out


def plan_queue_position(*, plan: Plan) -> int:
    """How many queued plans of its broker queue were asked for before this one (delivery.plan_queue)."""
    return delivery.plan_queue_position(plan=plan)


def plan_launch(*, plan: Plan, rank: int = 1) -> dict[str, Any] | None:
    """The launch configurations (Megatron-LM, torchtitan, DeepSpeed, SLURM) of the layout ranked `rank`
    (1 = best) of a finished plan; None when it has no layout. Built from the stored answer on each request,
    so older plans get them too. Raises SpecError naming "rank" for a rank the answer does not hold."""
    plans = (plan.result or {}).get("plans") or [] if plan.status == Plan.Status.DONE else []
    if not plans:
        return None
    if not 1 <= rank <= len(plans):
        raise SpecError.one("rank", f"must be between 1 and {len(plans)} (the ranked layouts kept), not {rank}")
    try:
        spec = parse_spec(plan.spec)
    except SpecError:  # saved under an older engine whose spec this one refuses: no configs, not a 500
        return None
    return {"rank": rank, "configs": launch_configs(spec, plans[rank - 1])}


def plan_as_dict(*, plan: Plan, launch_rank: int = 1) -> dict[str, Any]:
    """The JSON API's view of a plan: status always, the answer once done (with the launch configurations of
    the layout ranked `launch_rank`), the message once failed."""
    data: dict[str, Any] = {
        "code": str(plan.code),
        "url": plan.get_absolute_url(),
        "status": plan.status,
        "attempts": plan.attempts,
        "created_at": plan.created_at.isoformat(),
        "started_at": plan.started_at.isoformat() if plan.started_at else None,
        "finished_at": plan.finished_at.isoformat() if plan.finished_at else None,
        "spec": plan.spec,
        "options": plan_options(plan=plan),
    }
    if plan.status == Plan.Status.QUEUED:
        data["queue_position"] = plan_queue_position(plan=plan)
        data["waiting_for_broker"] = plan.is_waiting_for_broker
    if plan.is_pending:
        data["cut_off"] = plan.was_cut_off
    if plan.reused_from is not None:
        data["reused_from"] = {"code": str(plan.reused_from.code), "url": plan.reused_from.get_absolute_url()}
    if plan.status == Plan.Status.DONE:
        data["result"] = plan.result
        data["launch"] = plan_launch(plan=plan, rank=launch_rank)
        if isinstance(plan.result, dict):  # an answer from before the engine stated all of it gets the rest
            stated = plan_accuracy(plan=plan)
            data["result"] = {**plan.result, "accuracy": stated, **_rejections_by_count(plan.result)}
    if plan.status == Plan.Status.FAILED:
        data["error"] = plan.error
    return data


def plan_ranked_rows(*, plan: Plan) -> list[dict[str, Any]]:
    """The ranked layouts as the plan page's table shows them: each with its step time and time to train written
    in one unit down the column ("984.0 ms" sat above "1.017 s", "4 days" below "3.96 days")."""
    plans = (plan.result or {}).get("plans") or []
    steps = units.durations([p.get("step_time_s") for p in plans], digits=4, zeros=True)
    trains = units.durations([p.get("time_to_train_s") for p in plans], digits=3, zeros=True)
    return [{"plan": p, "step_time": step, "time_to_train": train} for p, step, train in zip(plans, steps, trains)]


def plan_options(*, plan: Plan) -> list[dict[str, Any]]:
    """Each modelling option the plan used, with its value and whether the request set it or it was assumed."""
    return options.plan_options(spec=plan.spec, sources=plan.option_sources)


# ---------------------------------------------------------------------------------------------------------
# Validation: how far to trust the numbers (planner/data/validation.json, written by `make validation`)


def plan_accuracy(*, plan: Plan) -> dict[str, Any] | None:
    """The measured error on published runs like this plan's (same GPU generation and precision): the one the
    answer states, or, for an answer from before the engine stated it, from the current validation."""
    if isinstance(plan.result, dict) and isinstance(plan.result.get("accuracy"), dict):
        stated = plan.result["accuracy"]
        if "ranking" in stated or stated.get("median_abs_err") is None:
            return stated
        # answered before the engine stated how far to trust the order: from the current validation
        snapshot = accuracy.load_snapshot()
        if snapshot is None:
            return stated
        return {**stated, "ranking": accuracy.ranking(snapshot, stated["median_abs_err"])}
    spec = plan.spec if isinstance(plan.spec, dict) else {}
    cluster, training = (s if isinstance(s, dict) else {} for s in (spec.get("cluster"), spec.get("training")))
    gpu = cluster.get("gpu")
    name = gpu.get("name") if isinstance(gpu, dict) else gpu
    return accuracy.for_gpu(str(name or ""), str(training.get("precision") or "bf16"),
                            gpu=gpu if isinstance(gpu, dict) else None)


def plan_ties(*, plan: Plan, stated: dict[str, Any] | None) -> list[int]:
    """The ranks whose step time is within the model's measured error of the best (accuracy.ties)."""
    plans = plan.result.get("plans") if isinstance(plan.result, dict) else None
    tie_within = ((stated or {}).get("ranking") or {}).get("tie_within")
    return accuracy.ties(plans or [], tie_within)


def validation_search_by_source(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    """The search's claimed gain per source (the median of the groups' medians) and pooled, as plans state it."""
    if not snapshot or not snapshot.get("search"):
        return None
    order = accuracy.ranking(snapshot, None)
    return order if order["search_gain_by_source"] is not None else None


def validation_by_stack(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each training stack's published runs (training.framework, planner/data/stacks.json) and the measured error on
    them, as a plan that names the stack states it."""
    if not snapshot:
        return []
    found = [(name, accuracy.for_stack(name, snapshot)) for name in stacks.STACKS]
    return [{**figures, "label": stacks.STACKS[name]["label"], "groups": ", ".join(stacks.STACKS[name]["rows"])}
            for name, figures in found if figures is not None]


def validation_read() -> dict[str, Any]:
    """The stored validation and whether it was measured with the running engine: {"validation": dict or None,
    "stale": bool, "fingerprint": the running engine's}. Read once per process (the file is a few hundred kB),
    never computed during a request: `validate` takes 1-2 minutes with the search."""
    snapshot = accuracy.load_snapshot()
    return {"validation": snapshot, "stale": snapshot is not None and accuracy.is_stale(snapshot),
            "fingerprint": accuracy.fingerprint()}
