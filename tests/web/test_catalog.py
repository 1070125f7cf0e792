"""The hardware catalog: seeded from fixtures/*.json, checked by the engine's rules, exported and imported."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from planner.catalog import load_catalog
from planner.spec import SECTIONS
from webui import services
from webui.models import CATALOG_MODELS, Fabric, GPUType, ModelPreset, NodeType

pytestmark = pytest.mark.django_db


def test_seeding_loads_every_fixture_row_and_is_idempotent(seeded):
    assert seeded["created"] == sum(len(v) for v in load_catalog().values())
    assert services.catalog_seed() == {"created": 0, "updated": 0, "unchanged": seeded["created"], "withheld": 0}


def test_the_database_catalog_is_what_the_engine_reads_from_the_fixtures(seeded):
    assert services.catalog_as_dict() == load_catalog()


def test_seeding_keeps_rows_someone_edited(seeded):
    GPUType.objects.filter(name="H100 SXM5 80GB").update(peak_tflops=900)
    services.catalog_seed()
    assert GPUType.objects.get(name="H100 SXM5 80GB").peak_tflops == 900


def test_catalog_has_the_presets_and_fabrics_the_issue_names(seeded):
    models = set(ModelPreset.objects.values_list("name", flat=True))
    assert {"GPT-3 175B", "Llama 3 8B", "Llama 3 70B", "Llama 3.1 405B", "Mixtral 8x7B"} <= models
    assert ModelPreset.objects.filter(name__startswith="DeepSeek-V3", experts=256, top_k=8).exists()
    kinds = {f.name.split()[0] for f in Fabric.objects.all()}
    assert {"EDR", "HDR", "NDR", "XDR", "RoCEv2", "AWS"} <= kinds
    assert NodeType.objects.get(name="GB200 NVL72 compute tray").nvlink_domain_gpus == 72


@pytest.mark.parametrize("section,model", CATALOG_MODELS.items())
def test_catalog_columns_are_the_spec_fields_plus_source(section, model):
    path = {"gpu": "cluster.gpu", "node": "cluster.node", "fabric": "cluster.fabric", "model": "model"}[section]
    columns = {f.name for f in model._meta.concrete_fields} - {"id"}
    assert columns == {f.name for f in SECTIONS[path]} | {"source"} | set(model.CATALOG_ONLY)
    assert not set(model.CATALOG_ONLY) & {f.name for f in SECTIONS[path]}  # the engine's spec never sees them


def test_a_row_is_checked_with_the_engines_messages():
    gpu = GPUType(name="broken", peak_tflops=-1, memory_gib=80, memory_gbytes_per_s=3000)
    with pytest.raises(ValidationError) as info:
        gpu.full_clean()
    assert info.value.message_dict["peak_tflops"] == ["must be at least 0.001 TFLOP/s (got -1)"]


def test_cross_field_rules_apply_to_a_row():
    preset = ModelPreset(name="odd", layers=2, hidden=100, heads=7, vocab=10, seq_len=16)
    with pytest.raises(ValidationError) as info:
        preset.full_clean()
    assert "must divide model.hidden (100)" in info.value.message_dict["heads"]
    node = NodeType(name="odd", gpus=8, nvlink_domain_gpus=12, nvlink_gbytes_per_s=900, nics=8, nic_gbits_per_s=400)
    with pytest.raises(ValidationError) as info:
        node.full_clean()
    assert "nvlink_domain_gpus" in info.value.message_dict


def test_a_fabric_topology_outside_the_engines_list_is_rejected():
    fabric = Fabric(name="odd", topology="ring")
    with pytest.raises(ValidationError) as info:
        fabric.full_clean()
    assert "must be one of" in info.value.message_dict["topology"][0]


def test_export_then_import_round_trips(seeded):
    rows = json.loads(json.dumps(services.catalog_export(), default=str))
    assert len(rows) == seeded["created"]
    for model in CATALOG_MODELS.values():
        model.objects.all().delete()
    assert services.catalog_import(rows=rows)["created"] == seeded["created"]
    assert services.catalog_as_dict() == load_catalog()


def test_import_updates_by_name_and_reports_unchanged(seeded):
    rows = services.catalog_export(rows=GPUType.objects.filter(name="B200"))
    rows[0]["fields"]["memory_gib"] = 192
    rows[0]["pk"] = 999  # pks differ between databases; names match
    assert services.catalog_import(rows=rows) == {"created": 0, "updated": 1, "unchanged": 0}
    assert GPUType.objects.get(name="B200").memory_gib == 192
    assert services.catalog_import(rows=rows) == {"created": 0, "updated": 0, "unchanged": 1}


@pytest.mark.parametrize("rows,expected", [
    ({"not": "a list"}, "JSON list"),
    ([42], "row 1 (?): must be an object"),
    ([{"model": "webui.teapot", "fields": {"name": "x"}}], "unknown model 'webui.teapot'"),
    ([{"model": "webui.gputype", "pk": 1, "fields": "x"}], "row 1 (?): must be an object"),  # was a 500
    # A name no query can hold, refused before the lookup (PostgreSQL refuses NUL; UTF-8, a lone surrogate).
    ([{"model": "webui.gputype", "fields": {"name": "G\ud800", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}}], "name: must be valid Unicode text"),
    ([{"model": "webui.gputype", "fields": {"name": "G\u0000", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}}], "name: must not contain control"),
    ([{"model": "webui.nodetype", "fields": {"name": "x", "gpus": 8, "nvlink_gbytes_per_s": 900, "nics": 8,
                                              "nic_gbits_per_s": 400, "source": "a\udc00b"}}],
     "source: must be valid Unicode text (it holds a lone surrogate)"),
    ([{"model": "webui.gputype", "fields": {"name": "x", "colour": "red"}}], "unknown field(s) colour"),
    ([{"model": "webui.nodetype", "fields": {"name": "x", "gpus": 8, "nvlink_gbytes_per_s": 900, "nics": 8,
                                              "nic_gbits_per_s": 400, "source": "a\u0000b"}}],
     "source: must not contain NUL"),
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": "fast", "memory_gib": 1,
                                             "memory_gbytes_per_s": 1}}], "row 1 (x): peak_tflops"),
    # Checked as the file gives them: Django would have stored 1.5 SMs as 1.
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100, "sm_count": 1.5}}],
     "row 1 (x): sm_count: must be a whole number (got 1.5)"),
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}},
      {"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 200, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}}],
     "row 2 (x): repeats the name of row 1"),
    # ... as it reads: " x " is stored as "x", and the second row silently overwrote the first.
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}},
      {"model": "webui.gputype", "fields": {"name": " x ", "peak_tflops": 200, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100}}],
     "row 2 (x): repeats the name of row 1"),
    # A null where the column takes none: full_clean skips a blank-able field, and the INSERT raised (a 500).
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100, "source": None}}],
     "row 1 (x): source: must not be null"),
    # Types the field tables do not judge: a text price raised TypeError (a 500), true was stored as 1.0, and a
    # list as its Python text.
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100, "price_per_gpu_hour_usd": "abc"}}],
     "row 1 (x): price_per_gpu_hour_usd: must be a number, not 'abc'"),
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100, "price_per_gpu_hour_usd": True}}],
     "row 1 (x): price_per_gpu_hour_usd: must be a number, not true"),
    ([{"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gib": 80,
                                             "memory_gbytes_per_s": 100, "source": ["a"]}}],
     "row 1 (x): source: must be text, not a list"),
])
def test_import_rejects_bad_rows_with_a_message(rows, expected):
    with pytest.raises(ValidationError) as info:
        services.catalog_import(rows=rows)
    assert expected in " ".join(info.value.messages)


def test_import_is_all_or_nothing(seeded):
    good = {"model": "webui.gputype", "fields": {"name": "New GPU", "peak_tflops": 1000, "memory_gib": 96,
                                                 "memory_gbytes_per_s": 4000}}
    bad = {"model": "webui.gputype", "fields": {"name": "Bad GPU", "peak_tflops": 0, "memory_gib": 96,
                                                "memory_gbytes_per_s": 4000}}
    with pytest.raises(ValidationError) as info:
        services.catalog_import(rows=[good, bad])
    assert "row 2 (Bad GPU): peak_tflops: must be at least 0.001" in info.value.messages[0]
    assert not GPUType.objects.filter(name="New GPU").exists()


def test_the_catalog_command_exports_and_imports(seeded, tmp_path, capsys):
    out = tmp_path / "catalog.json"
    call_command("catalog", "export", str(out))
    assert len(json.loads(out.read_text())) == seeded["created"]
    call_command("catalog", "import", str(out))
    assert "0 created, 0 updated" in capsys.readouterr().out
    # "-" is standard output (a file named "-" was written), and a UTF-16 file reads as the admin's upload does.
    call_command("catalog", "export", "-")
    assert len(json.loads(capsys.readouterr().out)) == seeded["created"]
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(out.read_text().encode("utf-16"))
    call_command("catalog", "import", str(utf16))
    assert "0 created, 0 updated" in capsys.readouterr().out


def test_the_cli_plans_on_the_catalog_exported_from_the_admin_as_the_api_does(seeded, small_spec, tmp_path):
    # The CLI reads the shipped fixtures; a catalog edited in the admin gave the API and the CLI two answers to one
    # request. `manage.py catalog export` then `--catalog` makes them one.
    import subprocess
    import sys

    from .conftest import ROOT

    GPUType.objects.filter(name="H100 SXM5 80GB").update(peak_tflops=700)
    call_command("catalog", "export", str(tmp_path / "edited.json"))
    small_spec["layout"] = {"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "recompute": "full", "zero": 1}
    (tmp_path / "spec.json").write_text(json.dumps(small_spec))
    out = subprocess.run([sys.executable, "-m", "planner", "plan", str(tmp_path / "spec.json"), "--top", "1",
                          "--catalog", str(tmp_path / "edited.json")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["spec"] == services.spec_parse(data=small_spec).to_dict()
    assert answer["spec"]["cluster"]["gpu"]["peak_tflops"] == 700
    shipped = subprocess.run([sys.executable, "-m", "planner", "plan", str(tmp_path / "spec.json"), "--top", "1"],
                             cwd=ROOT, capture_output=True, text=True)
    assert json.loads(shipped.stdout)["spec"]["cluster"]["gpu"]["peak_tflops"] == 989


def test_the_probe_spec_rows_are_checked_in_is_itself_valid():
    # If the engine's rules change so that the probe fails, rows would be checked against the wrong errors.
    from planner import parse_spec
    from webui.models import _PROBE

    parse_spec(_PROBE)


NEW_2026 = {GPUType: ("B300", "GB300", "H200 NVL", "AMD MI300X", "AMD MI325X", "AMD MI355X"),
            NodeType: ("HGX B300", "GB300 NVL72 compute tray", "H200 NVL server (4-GPU NVLink bridges)",
                       "AMD MI300X platform (8 GPUs)", "AMD MI325X platform (8 GPUs)", "AMD MI355X platform (8 GPUs)"),
            Fabric: ("XDR InfiniBand rail-optimized (Quantum-X800)", "Ethernet RoCE 800 GbE (Spectrum-X800)")}


def test_the_2026_rows_pass_the_models_own_checks(seeded):
    from webui.models import section_errors

    for model, names in NEW_2026.items():
        for name in names:
            row = model.objects.get(name=name)
            row.full_clean()  # raises ValidationError with the engine's messages if a field is off
            assert section_errors(model.SECTION, row.spec_fields()) == {}, name
            assert row.source, name
    mi355x = GPUType.objects.get(name="AMD MI355X")
    assert (mi355x.peak_tflops, mi355x.memory_gib, mi355x.sm_count) == (2516.6, 288, 256)


def test_import_says_a_missing_figure_once(db):
    row = {"model": "webui.gputype", "fields": {"name": "x", "peak_tflops": 100, "memory_gbytes_per_s": 100}}
    with pytest.raises(ValidationError) as info:
        services.catalog_import(rows=[row])
    assert info.value.messages == ["row 1 (x): memory_gib: is required"]


def test_a_shipped_row_deleted_or_renamed_here_is_not_seeded_again(seeded):
    # `make run` seeds at every start: a row an admin removed came back each time
    GPUType.objects.filter(name="H800 SXM5 80GB").delete()
    NodeType.objects.filter(name="DGX A100").update(name="our DGX A100s")
    again = services.catalog_seed()
    assert again == {"created": 0, "updated": 0, "unchanged": seeded["created"] - 2, "withheld": 2}
    assert not GPUType.objects.filter(name="H800 SXM5 80GB").exists()
    assert list(NodeType.objects.filter(name__contains="DGX A100").values_list("name", flat=True)) == ["our DGX A100s"]
    out = StringIO()
    call_command("catalog", "seed", "--restore", stdout=out)
    assert "2 created" in out.getvalue()
    assert GPUType.objects.filter(name="H800 SXM5 80GB").exists() and NodeType.objects.filter(name="DGX A100").exists()


def test_spaces_around_a_name_are_dropped_so_no_row_shadows_another(seeded):
    # Imported as "  H100 SXM5 80GB  " it stood beside the real row in the menus, and choosing it planned with
    # the real row's figures (a request's name is looked up stripped).
    row = {"model": "webui.gputype", "fields": {"name": "  H100 SXM5 80GB  ", "peak_tflops": 123,
                                                 "memory_gib": 80, "memory_gbytes_per_s": 3350}}
    assert services.catalog_import(rows=[row]) == {"created": 0, "updated": 1, "unchanged": 0}
    assert GPUType.objects.get(name="H100 SXM5 80GB").peak_tflops == 123
    assert GPUType.objects.filter(name__contains="H100 SXM5 80GB").count() == 1
    gpu = GPUType(name=" Our GPU ", peak_tflops=100, memory_gib=80, memory_gbytes_per_s=2000)
    gpu.full_clean()  # what the admin's form does before saving
    assert gpu.name == "Our GPU"


@pytest.mark.django_db(transaction=True)
def test_two_seeds_at_once_on_a_new_database_add_each_row_once_without_an_error():
    # Two `make run`s starting on one new PostgreSQL database: one seeded, the other stopped with an IntegrityError
    # traceback (duplicate key on the fabric's name).
    import threading

    from django.db import connection as default_connection

    start, answers, errors = threading.Barrier(2), [], []

    def seed() -> None:
        try:
            start.wait()
            answers.append(services.catalog_seed())
        except Exception as err:  # noqa: BLE001 -- what the test looks for
            errors.append(err)
        finally:
            default_connection.close()  # each thread's own connection

    threads = [threading.Thread(target=seed) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(len(v) for v in load_catalog().values())
    assert errors == [] and sorted(a["created"] for a in answers) == [0, total]
    assert sum(model.objects.count() for model in CATALOG_MODELS.values()) == total
