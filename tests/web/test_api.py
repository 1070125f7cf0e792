"""The JSON API: POST /api/plans, GET /api/plans/<code>, GET /api/catalog. Bad input is a 400, never a 500."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from planner.catalog import load_catalog
from webui import services
from webui.models import GPUType, NodeType, Plan

pytestmark = pytest.mark.django_db


def post(client, body, **extra):
    payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
    # The header even with an empty body, as curl sends it (Django's test client would leave it out).
    return client.post("/api/plans", payload, content_type="application/json",
                       **{"CONTENT_TYPE": "application/json", **extra})


def test_posting_a_spec_answers_code_url_and_status(client, seeded, small_spec, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(client, small_spec)
    assert response.status_code == 201
    body = response.json()
    plan = Plan.objects.get()
    assert body == {"code": str(plan.code), "url": f"http://testserver/plans/{plan.code}/", "status": "queued"}
    assert len(callbacks) == 1


def test_the_api_takes_the_shared_examples(client, seeded):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    for path in sorted(examples.glob("*.json")):
        assert post(client, path.read_text()).status_code == 201, path.name


def test_a_model_preset_by_name_is_the_same_request_as_the_preset_inline(client, seeded, small_spec):
    """`"model": "Llama 3 8B"` reads the admin's preset: the same canonical spec, so the same plan, as the
    preset's fields posted inline (the CLI and sweeps read the name the same way)."""
    small_spec["model"] = "Llama 3 8B"
    named = post(client, small_spec)
    small_spec["model"] = services.catalog_as_dict()["model"]["Llama 3 8B"]
    inline = post(client, small_spec)
    assert named.status_code == inline.status_code == 201
    first, second = (Plan.objects.get(code=r.json()["code"]) for r in (named, inline))
    assert first.spec_hash == second.spec_hash and first.spec["model"]["layers"] == 32
    small_spec["model"] = "Llama 9"
    errors = post(client, small_spec).json()["errors"]
    assert errors["model"][0].startswith("unknown catalog name 'Llama 9' (known: ")


SPEC_FOR_PARITY = {"model": "Llama 3 8B", "training": {"global_batch": 64},
                   "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                               "fabric": "NDR InfiniBand fat tree"}}


@pytest.mark.parametrize("body,field,message", [
    (b"", "spec", "is empty (a JSON object was expected)"),  # was "must be a JSON object, not null"
    (b"{not json", "spec", "is not valid JSON"),
    (b"\xff\xfe", "spec", "is empty"),  # a UTF-16 byte-order mark and nothing after it
    ("[1, 2]", "spec", "must be a JSON object, not a list"),
    ({"model": {}}, "model.layers", "is required"),
    ({"cluster": {"num_gpus": 8, "gpu": "Imaginary", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}},
     "cluster.gpu", "unknown catalog name 'Imaginary'"),
    # More digits than a float holds, and nesting past the decoder's recursion: bad input, not a 500.
    ('{"cluster": {"num_gpus": 1' + "0" * 400 + "}}", "cluster.num_gpus", "must be at most 1048576"),
    ("[" * 990 + "]" * 990, "spec", "is nested more than 32 levels deep"),
    # The last of two was taken silently, where the writer may have meant either.
    ('{"cluster": {"num_gpus": 64, "num_gpus": 8}}', "spec",
     "is ambiguous: the key 'num_gpus' appears twice in one object (give it once)"),
    ('{"model": ' + "[" * 40 + "]" * 40 + "}", "spec", "is nested more than 32 levels deep"),
])
def test_bad_input_is_a_400_naming_the_field(client, seeded, body, field, message):
    response = post(client, body)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert any(message in m for m in errors[field]), errors
    assert not Plan.objects.exists()


def test_bounds_errors_name_the_field_and_the_limit(client, seeded, small_spec):
    small_spec["cluster"]["num_gpus"] = 60
    small_spec["model"]["heads"] = 0
    errors = post(client, small_spec).json()["errors"]
    # One pass: the model's bound and the cluster's cross-field rule are independent, so both are reported.
    assert errors["model.heads"] == ["must be at least 1 (got 0)"]
    assert errors["cluster.num_gpus"][0].startswith("must be a positive multiple of node.gpus (8)")
    assert set(errors) == {"model.heads", "cluster.num_gpus"}


@pytest.mark.parametrize("name, body", [
    ("bom", b"\xef\xbb\xbf" + json.dumps(SPEC_FOR_PARITY).encode()),
    ("utf16", json.dumps(SPEC_FOR_PARITY).encode("utf-16")),
    ("latin1", json.dumps(SPEC_FOR_PARITY).replace("Llama 3 8B", "Llama 3 8B caf\u00e9").encode("latin-1")),
    ("empty", b"  \n"),
    ("truncated", b'{"model": "Llama 3 8B", "training": {"global_batch": 64, "precision": "bf'),
    ("padded", json.dumps(SPEC_FOR_PARITY).encode() + b" " * 1_000_500),
    ("too-large", json.dumps(SPEC_FOR_PARITY).encode() + b" " * (1024 * 1024)),
    ("repeated-key", json.dumps(SPEC_FOR_PARITY).replace('"num_gpus": 64', '"num_gpus": 64, "num_gpus": 8').encode()),
])
def test_the_cli_reads_a_file_as_the_api_reads_a_body(client, seeded, tmp_path, name, body):
    # A UTF-8 byte-order mark or UTF-16 was a plan through the API and "invalid JSON" from the CLI; a Latin-1 byte
    # was three messages (one about a "lone surrogate" on standard input); the CLI's bound was 1,000,000 bytes
    # against the API's 1 MiB; a truncated file's message stopped mid-phrase.
    import subprocess
    import sys

    from .conftest import ROOT

    response = client.post("/api/plans", body, content_type="application/json")
    (tmp_path / "spec.json").write_bytes(body)
    for args, stdin in (([str(tmp_path / "spec.json")], None), (["-"], body)):
        out = subprocess.run([sys.executable, "-m", "planner", "plan", *args, "--top", "1"], cwd=ROOT, input=stdin,
                             capture_output=True)
        if response.status_code == 201:
            assert out.returncode == 0, out.stderr
        else:
            assert out.returncode == 2 and response.status_code in (400, 413)
            (message,) = response.json()["errors"]["spec"]
            assert f"  spec: {message}\n" in out.stderr.decode(), (out.stderr, message)
    expected = {"bom": 201, "utf16": 201, "padded": 201, "too-large": 413}.get(name, 400)
    assert response.status_code == expected, response.content
    if name == "latin1":
        assert response.json()["errors"]["spec"] == ["is not UTF-8 text (byte 0xe9 at position 25)"]


def test_a_body_over_the_limit_is_refused(client, seeded):
    response = post(client, b"[" + b"1," * 600_000 + b"1]")
    assert response.status_code == 413 and "too large" in response.json()["errors"]["spec"][0]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_not_declared_json_is_refused(client, seeded, small_spec, content_type):
    # What a page on another site can post without a CORS preflight: the API never takes it.
    response = post(client, small_spec, CONTENT_TYPE=content_type)
    assert response.status_code == 415
    assert response.json() == {"errors": {"spec": ["must be sent as Content-Type: application/json"]}}
    assert not Plan.objects.exists()


@pytest.mark.parametrize("charset, taken", [("utf-8", True), ('"UTF-8"', True), ("utf8", True),
                                             ("latin-1", False), ("utf-16", False)])
def test_json_is_read_as_utf_8_and_a_body_declared_in_another_charset_is_refused(client, seeded, small_spec,
                                                                                  charset, taken):
    # A Latin-1 body was read as UTF-8 all the same (its "é" then refused as invalid UTF-8, or taken wrongly).
    response = post(client, small_spec, CONTENT_TYPE=f"application/json; charset={charset}")
    if taken:
        assert response.status_code == 201, response.json()
        return
    assert response.status_code == 415
    assert response.json() == {"errors": {"spec": [
        f"must be sent in UTF-8, as JSON is (RFC 8259), not charset={charset}"]}}
    assert not Plan.objects.exists()


@pytest.mark.parametrize("path, field", [("/api/plans", "spec"), ("/api/sweeps", "sweep")])
def test_a_body_sent_in_chunks_without_a_length_is_a_411_saying_so(client, seeded, small_spec, path, field):
    # WSGI reads a chunked body without Content-Length as empty: the answer said "is empty (a JSON object was
    # expected)" of a body that was there (curl -H 'Transfer-Encoding: chunked', urllib posting an iterable).
    response = client.post(path, json.dumps(small_spec), content_type="application/json",
                           HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="")
    assert response.status_code == 411
    assert response.json()["errors"][field] == [
        "was sent in chunks (Transfer-Encoding: chunked), which this server does not read: send it with a "
        "Content-Length (curl: --data-binary @FILE, without a Transfer-Encoding header)"]
    assert not Plan.objects.exists()


def test_get_shows_status_then_the_answer(client, seeded, small_spec):
    code = post(client, small_spec).json()["code"]
    body = client.get(f"/api/plans/{code}").json()
    assert body["status"] == "queued" and "result" not in body and body["queue_position"] == 0
    assert body["spec"]["cluster"]["node"]["gpus"] == 8
    plan = services.plan_run(plan_id=Plan.objects.get(code=code).pk)
    body = client.get(f"/api/plans/{code}").json()
    assert body["status"] == "done", plan.error
    assert body["result"]["plans"][0]["step_time_s"] > 0


def test_a_failed_plan_reports_its_error(client, seeded):
    plan = Plan.objects.create(spec={"model": 1}, spec_hash="x", status="failed", error="went wrong")
    assert client.get(f"/api/plans/{plan.code}").json()["error"] == "went wrong"


def test_a_code_in_capitals_finds_its_plan_as_compare_does(client, seeded, small_spec):
    """UUIDs are case-insensitive: compare took a code in capitals, the plan's own page and API were 404s."""
    plan = Plan.objects.get(code=post(client, small_spec).json()["code"])
    upper = str(plan.code).upper()
    assert client.get(f"/api/plans/{upper}").json()["code"] == str(plan.code)
    assert client.get(f"/plans/{upper}/").status_code == 200
    assert plan.get_absolute_url() == f"/plans/{plan.code}/"  # links stay in lower case


@pytest.mark.parametrize("url", ["/api/plans/00000000-0000-0000-0000-000000000000", "/api/plans/nope",
                                 "/api/nothing"])
def test_unknown_plans_are_a_json_404(client, url):
    response = client.get(url)
    assert response.status_code == 404
    assert response.json() == {"errors": {"url": [f"no plan, sweep or endpoint at {url}"]}}  # as a 400's shape


def test_an_internal_error_under_the_api_is_json_in_the_same_shape(rf):
    from webui.views import server_error
    response = server_error(rf.get("/api/plans"))
    assert response.status_code == 500
    assert json.loads(response.content) == {"errors": {"server": ["internal error; the plan, if saved, is kept"]}}
    assert b"<html" in server_error(rf.get("/plans/x/")).content.lower()  # a page elsewhere


def test_wrong_methods_are_refused(client, seeded, small_spec):
    assert client.get("/api/plans").status_code == 405
    assert client.post("/api/catalog").status_code == 405
    code = post(client, small_spec).json()["code"]
    # With CSRF checks on, as a browser would be: still a JSON 405 naming the methods, never the CSRF page.
    strict = Client(enforce_csrf_checks=True)
    for method in ("delete", "put", "patch"):
        response = getattr(strict, method)(f"/api/plans/{code}")
        assert response.status_code == 405 and response["Allow"] == "GET, HEAD"
        assert response.json() == {"errors": {"method": [f"{method.upper()} is not allowed here; use GET or HEAD"]}}
    assert Plan.objects.filter(code=code).exists()


def test_the_catalog_lists_every_row_as_spec_fields(client, seeded):
    listed = client.get("/api/catalog").json()
    only = listed.pop("catalog_only")
    assert listed == load_catalog()
    # Beside the spec fields, what a spec has no field for: a GPU's price (sweeps' costs), a node's GPU types.
    assert only == {"node": {node.name: {"gpu_types": node.held_gpus()} for node in NodeType.objects.all()}}
    assert only["node"]["8x GPU PCIe 5.0 server (no NVLink)"] == {"gpu_types": []}  # any GPU, said as such
    GPUType.objects.filter(name="H200 SXM 141GB").update(price_per_gpu_hour_usd=4.1)
    assert client.get("/api/catalog").json()["catalog_only"]["gpu"] == {
        "H200 SXM 141GB": {"price_per_gpu_hour_usd": 4.1}}


def test_the_training_stacks_are_listed_with_their_settings_and_sources(client):
    listed = client.get("/api/stacks").json()
    assert list(listed) == ["megatron_core", "torchtitan", "fsdp"]
    assert listed["torchtitan"]["options"]["projections"] == "separate"
    assert set(listed["fsdp"]["sources"]) == set(listed["fsdp"]["options"])
    assert client.post("/api/stacks").status_code == 405


def test_a_nul_character_is_refused_not_a_database_error(client, seeded, small_spec):
    small_spec["model"]["name"] = "bad\u0000name"  # PostgreSQL's jsonb cannot store it
    response = post(client, small_spec)
    assert response.status_code == 400
    assert response.json()["errors"] == {"model.name": ["must not contain control characters"]}


SURROGATE = "must be valid Unicode text (it holds a lone UTF-16 surrogate, such as \\ud800)"


def test_a_lone_surrogate_in_a_name_is_refused_and_no_plan_is_saved(client, seeded, small_spec):
    # json.dumps writes it as the escape "\ud800", which JSON allows and no UTF-8 page can show: saved, it made
    # the plan's page, the admin list and compare answer 500 for good.
    small_spec["model"]["name"] = "\ud800"
    response = post(client, small_spec)
    assert response.status_code == 400
    assert response.json()["errors"] == {"model.name": [SURROGATE]}
    assert not Plan.objects.exists()


@pytest.mark.parametrize("path", ["model", "cluster.gpu", "cluster.node", "cluster.fabric"])
def test_a_lone_surrogate_in_a_catalog_name_is_refused_not_a_database_error(client, seeded, small_spec, path):
    section, _, key = path.partition(".")
    if key:
        small_spec[section][key] = "H100\udfff"
    else:
        small_spec[section] = "Llama\ud800"
    response = post(client, small_spec)
    assert response.status_code == 400
    assert response.json()["errors"] == {path: [SURROGATE]}


@pytest.mark.parametrize("field", ["gpu", "node", "fabric"])
def test_a_nul_character_in_a_catalog_name_is_refused_not_a_database_error(client, seeded, small_spec, field):
    # The catalog row is looked up by name before the spec's text rules run: PostgreSQL refuses NUL in a query.
    small_spec["cluster"][field] = "H100\u0000"
    response = post(client, small_spec)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [f"cluster.{field}"]


def _done_plan(small_spec) -> Plan:
    spec = services.spec_parse(data=small_spec).to_dict()
    plan = Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec), top=3)
    plan = services.plan_run(plan_id=plan.pk)
    assert plan.status == "done", plan.error
    return plan


def test_a_done_plan_answers_with_the_launch_configs_of_its_best_layout(client, seeded, small_spec):
    plan = _done_plan(small_spec)
    body = client.get(f"/api/plans/{plan.code}").json()
    launch = body["launch"]
    assert launch["rank"] == 1 and set(launch["configs"]) == {"megatron", "torchtitan", "deepspeed", "slurm"}
    best = body["result"]["plans"][0]
    megatron = launch["configs"]["megatron"]
    assert f"  --tensor-model-parallel-size {best['layout']['tp']}\n" in megatron["text"]
    assert megatron["source"].startswith("NVIDIA/Megatron-LM ") and "--global-batch-size" in megatron["names"]
    second = client.get(f"/api/plans/{plan.code}?rank=2").json()["launch"]
    assert second["rank"] == 2 and body["result"]["plans"][1]["label"] in second["configs"]["slurm"]["text"]


# Read as the CLI reads --rank (the engine's bounds of `top`): "3.0" was refused where ?top=3.0 was taken, and
# ?rank=1&rank=2 quietly meant 2.
@pytest.mark.parametrize("rank,message", [("0", "must be at least 1 (got 0)"), ("4", "must be between 1 and 3"),
                                          ("two", "must be a number, not 'two'"), ("-1", "must be at least 1"),
                                          ("%C2%B2", "must be a number, not '²'"),
                                          # past top's bounds: said against the plan's own layouts, not 50
                                          ("99", "must be between 1 and 3 (the ranked layouts kept), not 99"),
                                          ("1e400", "must be at most 50"),
                                          ("2.5", "must be a whole number (got 2.5)"),
                                          ("1&rank=2", "is given more than once")])
def test_a_bad_launch_rank_is_a_400_naming_rank(client, seeded, small_spec, rank, message):
    plan = _done_plan(small_spec)
    response = client.get(f"/api/plans/{plan.code}?rank={rank}")
    assert response.status_code == 400
    assert message in response.json()["errors"]["rank"][0]


def test_a_queued_plan_has_no_launch_configs_yet(client, seeded, small_spec):
    spec = services.spec_parse(data=small_spec).to_dict()
    plan = Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec))
    body = client.get(f"/api/plans/{plan.code}?rank=7").json()
    assert body["status"] == "queued" and "launch" not in body


def test_an_answer_reads_back_as_the_engine_wrote_it_on_either_database(client, seeded, small_spec):
    # PostgreSQL's jsonb gave the float 3.855525483726766e+19 back as the integer 38555254837267660000 (past any
    # 64-bit integer) and its rejection counts in an order of its own; SQLite gave them as written.
    plan = _done_plan(small_spec)
    result = dict(plan.result, model={**plan.result["model"], "flops_per_step": 3.855525483726766e+19},
                  rejected={"a_rare_reason": 1, "the_commonest": 97, "zz": 12},
                  rejected_examples={"a_rare_reason": "one", "the_commonest": "many", "zz": "some"})
    Plan.objects.filter(pk=plan.pk).update(result=result)
    text = client.get(f"/api/plans/{plan.code}").content.decode()
    assert '"flops_per_step": 3.855525483726766e+19' in text and "38555254837267660000" not in text
    body = json.loads(text)["result"]
    assert list(body["rejected"]) == ["the_commonest", "zz", "a_rare_reason"]
    assert list(body["rejected_examples"]) == ["the_commonest", "zz", "a_rare_reason"]
    assert Plan.objects.get(pk=plan.pk).result["plans"][0]["rank"] == 1  # small integers stay integers


@pytest.mark.parametrize("top, message", [
    ("0", "must be at least 1 (got 0)"), ("-3", "must be at least 1 (got -3)"), ("51", "must be at most 50 (got 51)"),
    ("abc", "must be a number, not 'abc'"), ("2.5", "must be a whole number (got 2.5)"),
    ("", "must be a number, not ''"), ("%C2%B2", "must be a number, not '²'"), ("5&top=7", "is given more than once")])
def test_a_top_out_of_range_is_a_400_naming_top(client, seeded, small_spec, top, message):
    # They were quietly read as 1, 1, 50 and 10: a script asking for 0 got one layout back and no word. The
    # bounds and the words are the engine's (planner.spec.TOP), as the CLI's --top says them.
    response = client.post(f"/api/plans?top={top}", small_spec, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"top": [message]}
    assert not Plan.objects.exists()
    sweep = {"base": small_spec, "vary": {"training.global_batch": [64, 128]}}
    assert client.post(f"/api/sweeps?top={top}", sweep, content_type="application/json").status_code == 400


def test_an_unknown_query_parameter_is_a_400_naming_it(client, seeded, small_spec):
    # "?tpo=3" was ignored and the plan kept 10 layouts, where an unknown key in the body is refused.
    response = client.post("/api/plans?tpo=3", small_spec, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"query": ["unknown parameter 'tpo' (known: top)"]}
    sweep = {"base": small_spec, "vary": {"training.global_batch": [64, 128]}}
    assert client.post("/api/sweeps?tpo=3", sweep, content_type="application/json").status_code == 400
    assert not Plan.objects.exists()
    code = client.post("/api/plans", small_spec, content_type="application/json").json()["code"]
    assert client.get(f"/api/plans/{code}?rnak=2").json()["errors"] == {
        "query": ["unknown parameter 'rnak' (known: rank)"]}
    assert client.get(f"/api/plans/{code}?rank=1").status_code == 200


def test_a_top_in_range_keeps_that_many_layouts(client, seeded, small_spec):
    code = client.post("/api/plans?top=2", small_spec, content_type="application/json").json()["code"]
    assert Plan.objects.get(code=code).top == 2


def test_a_number_past_a_double_is_past_the_fields_bound_on_plans_and_sweeps(client, seeded, small_spec):
    # JSON's 1e400 is a number the user wrote; it was "must be a number, not Infinity" (the decoder's inf).
    text = json.dumps(small_spec).replace('"global_batch": 256', '"global_batch": 1e400')
    response = client.post("/api/plans", text, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"training.global_batch": ["must be at most 16777216 sequences"]}
    sweep = json.dumps({"base": small_spec, "vary": {"training.global_batch": [128, 256]}}).replace("128", "-1e400")
    response = client.post("/api/sweeps", sweep, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"]["vary.training.global_batch"] == [
        "scenario {training.global_batch: -1e400}: training.global_batch: must be at least 1 sequence"]
    assert not Plan.objects.exists()
