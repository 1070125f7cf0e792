"""The pages: the form, a plan while it waits, when it failed, and when it is done."""
from __future__ import annotations

import html
import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse
from django.utils import timezone

from webui import services
from webui.models import Plan

from .test_forms import post_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(seeded):
    return services.catalog_as_dict()


def make_plan(spec_doc, **fields) -> Plan:
    spec = services.spec_parse(data=spec_doc).to_dict()
    return Plan.objects.create(spec=spec, spec_hash=services.spec_hash(spec), **fields)


def test_the_form_page_shows_every_section_with_units_and_help(client, seeded):
    page = client.get("/").content.decode()
    for text in ("Model", "Training", "Cluster", "GPU", "Node", "Fabric", "Pin the layout",
                 "Memory (GiB)", "NVLink bandwidth (GB/s)", "Tokens to train (tokens)", "custom GPU",
                 'value="Llama 3 70B" selected', 'name="num_gpus" value="512"'):
        assert text in page, text
    assert "/static/webui/form." in page and 'id="catalog-data"' in page


def test_submitting_the_form_saves_a_queued_plan_and_enqueues_it_after_commit(
        client, catalog, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post("/", post_data(catalog))
    plan = Plan.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/plans/{plan.code}/"
    assert plan.status == "queued" and plan.spec["model"]["name"] == "Llama 3 70B"
    assert plan.spec["cluster"]["gpu"]["memory_gib"] == 80  # catalog names expanded
    assert len(plan.spec_hash) == 64
    assert len(callbacks) == 1  # the task goes out only once the row is committed


def test_a_bad_form_shows_messages_and_saves_nothing(client, catalog):
    response = client.post("/", post_data(catalog, num_gpus="100", training__global_batch="zero"))
    page = response.content.decode()
    assert response.status_code == 200
    assert "must be a number, not &#x27;zero&#x27;" in page
    assert "Some fields need a look" in page
    assert not Plan.objects.exists()


def test_an_empty_post_is_answered_with_messages(client, seeded):
    response = client.post("/", {})
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()


def test_a_queued_plan_shows_progress_that_updates_itself(client, small_spec, seeded):
    plan = make_plan(small_spec, dispatched_at=timezone.now())
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="plan-progress"' in page and f'data-status-url="/api/plans/{plan.code}"' in page
    assert "waiting for a worker" in page
    assert '<meta http-equiv="refresh"' in page  # without JavaScript, too
    assert "/static/webui/plan." in page and "plotly.min." not in page


def test_a_plan_whose_search_process_died_says_it_is_searched_again(client, small_spec, seeded):
    plan = make_plan(small_spec, dispatched_at=timezone.now())
    # Always on the page, for plan.js to show when a poll finds the search cut off; hidden until then.
    assert 'id="progress-restarted" hidden' in client.get(plan.get_absolute_url()).content.decode()
    Plan.objects.filter(pk=plan.pk).update(attempts=1)  # what delivery.plan_lost leaves: queued, one try cut off
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="progress-restarted">' in page and "searched again from the start; nothing is lost" in page
    assert client.get(f"/api/plans/{plan.code}").json()["cut_off"] is True  # what plan.js polls
    Plan.objects.filter(pk=plan.pk).update(status="running", attempts=2)
    assert 'id="progress-restarted">' in client.get(plan.get_absolute_url()).content.decode()
    Plan.objects.filter(pk=plan.pk).update(status="running", attempts=1)
    assert 'id="progress-restarted" hidden' in client.get(plan.get_absolute_url()).content.decode()


def test_a_plan_the_broker_has_not_taken_yet_says_it_is_waiting_for_the_queue(client, small_spec, seeded):
    plan = make_plan(small_spec)  # saved, never handed to the broker: in the outbox
    page = client.get(plan.get_absolute_url()).content.decode()
    assert 'id="plan-progress"' in page
    assert "waiting for the task queue" in page and "nothing is lost" in page
    assert client.get(f"/api/plans/{plan.code}").json()["waiting_for_broker"] is True


def test_a_failed_plan_says_why_and_offers_to_try_again(client, small_spec, seeded):
    plan = make_plan(small_spec, status="failed", error="The engine failed: boom")
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "The search failed" in page and "The engine failed: boom" in page
    assert f'action="/plans/{plan.code}/retry/"' in page and "Try again" in page
    response = client.post(reverse("plan-retry", args=[plan.code]))
    retried = Plan.objects.exclude(pk=plan.pk).get()
    assert response["Location"] == retried.get_absolute_url()
    assert retried.status == "queued" and retried.spec == plan.spec
    plan.refresh_from_db()
    assert plan.status == "failed"  # the old one stays as it was


def test_retrying_a_plan_that_did_not_fail_changes_nothing(client, small_spec, seeded):
    plan = make_plan(small_spec, status="done", result={"plans": []})
    response = client.post(reverse("plan-retry", args=[plan.code]))
    assert response["Location"] == plan.get_absolute_url()
    assert Plan.objects.count() == 1


def test_a_done_plan_shows_the_best_layout_alternatives_rejections_and_charts(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    assert plan.status == "done", plan.error
    best = plan.result["plans"][0]
    page = client.get(plan.get_absolute_url()).content.decode()
    assert best["description"] in page and best["label"] in page
    for text in ("Step time", "Tokens/s", "MFU", "Memory per GPU", "Time to train", "GPU-hours",
                 "Ranked layouts", "Rejected layouts", 'id="figures-data"', "/static/plotly/plotly.min."):
        assert text in page, text
    for chart in ("step-time", "comm", "memory", "placement", "candidates"):
        assert f'id="chart-{chart}"' in page
    assert 'http-equiv="refresh"' not in page
    # The request line: "node: NAME" (a custom "7-GPU node" read "7-GPU node nodes"), exact counts with separators.
    meta = re.search(r'<p class="meta">(.*?)</p>', page, re.S).group(1)
    assert "node: DGX H100, fabric: NDR InfiniBand fat tree ·" in meta
    assert "global batch 256 × 8,192 tokens, bf16" in meta


@pytest.mark.parametrize("precision, note", [("bf16", "of the dense 16-bit peak, 989 TFLOP/s a GPU"),
                                             ("fp8", "of the FP8 peak, 1,979 TFLOP/s a GPU")])
# and how its model FLOPs count attention: in full, so that a long causal sequence's MFU can pass its GEMMs' rate
def test_mfu_says_which_peak_it_is_measured_against(client, small_spec, seeded, precision, note):
    # An FP8 plan's MFU is of the FP8 peak, twice the BF16 one on an H100: beside a BF16 plan's it reads as worse
    # though it is faster, so the page says so.
    small_spec["training"]["precision"] = precision
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    assert plan.result["model"]["utilization_peak_tflops"] == {"bf16": 989.0, "fp8": 1979.0}[precision]
    page = client.get(plan.get_absolute_url()).content.decode()
    assert (f'<small class="muted" id="mfu-peak">{note}; attention counted without the causal half, as PaLM counts '
            f'it</small>') in page
    best = plan.result["plans"][0]
    assert best["mfu"] == pytest.approx(best["model_tflops_per_gpu"] / plan.result["model"]["utilization_peak_tflops"],
                                        rel=1e-3)


def test_a_plan_naming_a_stack_says_how_the_model_does_on_that_stacks_runs(client, small_spec, seeded):
    small_spec["training"]["framework"] = "torchtitan"
    plan = services.plan_run(plan_id=make_plan(small_spec).pk)
    page = client.get(plan.get_absolute_url()).content.decode()
    stated = re.search(r'<p class="trust" id="stack-accuracy">([^<]*)</p>', page).group(1)
    assert stated == plan.result["stack_accuracy"]["statement"]
    assert stated.startswith("On published runs of the torchtitan stack: ±") and "median over 48 runs" in stated
    assert '<span id="plan-stack">torchtitan stack</span>' in page
    small_spec["training"]["framework"] = "generic"
    plain = services.plan_run(plan_id=make_plan(small_spec).pk)
    plain_page = client.get(plain.get_absolute_url()).content.decode()
    assert 'id="stack-accuracy"' not in plain_page and 'id="plan-stack"' not in plain_page


def test_an_infeasible_request_is_an_answer_with_reasons(client, seeded):
    doc = {"model": {"name": "Llama 3.1 405B", "layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8,
                     "ffn_hidden": 53248, "gated_mlp": True, "vocab": 128256, "seq_len": 8192},
           "training": {"global_batch": 64},
           "cluster": {"num_gpus": 8, "gpu": "A100 SXM4 40GB", "node": "DGX A100", "fabric": "HDR InfiniBand fat tree"}}
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert plan.status == "done" and plan.result["plans"] == []
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "No layout fits" in page
    assert re.search(r"<td>\d[\d,]*</td>", page)  # counts per reason
    assert plan.result["rejected"]
    assert "What usually helps: GPUs with more memory, more GPUs, a smaller global batch or a shorter sequence." in page
    # A batch too small for the GPUs: more GPUs and a smaller batch were advised, the opposite of what helps.
    doc["model"], doc["training"]["global_batch"], doc["cluster"]["num_gpus"] = "Llama 3 70B", 1, 1_048_576
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert next(iter(plan.result["rejected"])) == "dp_does_not_divide_batch"
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "a larger global batch (a multiple of the data-parallel degrees the GPU count allows) or fewer GPUs." in page
    # A pin the layouts cannot meet: the advice is about the pin, not about memory.
    doc.update(model="Mixtral 8x7B", layout={"tp": 2, "sequence_parallel": False})
    doc["training"]["global_batch"], doc["cluster"]["num_gpus"] = 256, 64
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert plan.result["plans"] == [] and next(iter(plan.result["rejected"])) == "moe_tp_needs_sp"
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "What usually helps: sequence parallelism on (an MoE model with TP &gt; 1 needs it), or TP 1; or leave " \
           "the pinned tp, sequence_parallel to the search." in page
    # A TP past the NVLink domain is one layout, rejected: "1 layouts and every one was rejected".
    doc.update(model="Llama 3 70B", layout={"tp": 16})
    doc["cluster"].update(num_gpus=512, gpu="H100 SXM5 80GB", node="DGX H100")
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert plan.result["searched"] == 1
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "The planner considered 1 layout and it was rejected" in page and "1 layout considered, 0 feasible" in page
    assert "; or leave the pinned tp to the search." in page  # the advice named memory and GPUs alone


def test_one_token_to_train_is_one_token(client, small_spec, seeded):
    small_spec["training"]["tokens"] = 1
    page = client.get(services.plan_run(plan_id=make_plan(small_spec).pk).get_absolute_url()).content.decode()
    assert "Time to train and GPU-hours are for 1 token." in page


def test_the_form_can_start_from_a_saved_plan(client, small_spec, seeded):
    small_spec["training"]["tokens"] = 1e12
    plan = make_plan(small_spec)
    page = client.get(f"/?from={plan.code}").content.decode()
    assert 'value="Llama 3 8B"' in page and 'name="num_gpus" value="64"' in page
    # Numbers as the engine writes them, not as Python does ("1000000000000.0", "989.0").
    assert 'name="training__tokens" value="1000000000000"' in page and 'name="gpu__peak_tflops" value="989"' in page
    assert 'id="copy-of"' in page and f'href="{plan.get_absolute_url()}">{plan.title}</a>' in page
    assert 'id="copy-missing"' not in page
    assert re.search(r'id="fs-layout"[^>]*>\s*<legend>[^<]*</legend>\s*<details>', page)  # nothing pinned: closed


def test_a_copy_of_a_plan_with_pins_opens_the_pin_section_and_names_them(client, small_spec, seeded):
    # Closed, the section hid a pinned TP that then went with the next request unseen.
    small_spec["layout"] = {"tp": 2, "recompute": "full"}
    page = client.get(f"/?from={make_plan(small_spec).code}").content.decode()
    assert re.search(r'id="fs-layout"[^>]*>\s*<legend>[^<]*</legend>\s*<details open>', page)
    assert re.search(r'<span class="pinned">Pinned: [^<]*TP[^<]*, [^<]*[Rr]ecompute[^<]*\.</span>', page), page


@pytest.mark.parametrize("code", ["00000000-0000-0000-0000-000000000000", "not-a-uuid"])
def test_a_copy_of_a_plan_that_is_not_there_says_so_above_the_default_form(client, seeded, code):
    # The link of a deleted plan, or a mistyped one: a blank form alone looked like the copy.
    page = client.get(f"/?from={code}").content.decode()
    assert f"There is no plan “{code}” to copy (the link may be mistyped, or the plan deleted)" in page
    assert 'id="copy-of"' not in page and 'name="num_gpus"' in page
    assert 'id="copy-missing"' not in client.get("/").content.decode()


def test_a_copy_link_with_a_control_character_is_said_printably(client, seeded):
    page = client.get("/?from=ab%00c%1b").content.decode()  # a NUL went into the HTML as it was
    assert "There is no plan “ab?c?” to copy" in page and "\x00" not in page and "\x1b" not in page


@pytest.mark.parametrize("url", ["/plans/00000000-0000-0000-0000-000000000000/", "/plans/not-a-uuid/",
                                 "/?from=not-a-uuid", "/nowhere"])
def test_unknown_addresses_get_a_plain_answer(client, seeded, url):
    response = client.get(url)
    assert response.status_code in (200, 404)
    if response.status_code == 404:
        assert "There is no such page or plan" in response.content.decode()


def test_wrong_methods_are_refused_not_crashed(client, small_spec, seeded):
    plan = make_plan(small_spec)
    assert client.get(reverse("plan-retry", args=[plan.code])).status_code == 405
    assert client.post(plan.get_absolute_url()).status_code == 405
    assert client.delete("/").status_code == 405


def test_every_page_answers_head_as_it_answers_get(client, small_spec, seeded):
    # Link checkers, uptime probes and link-preview bots ask HEAD first: a shared plan link answered 405.
    plan = make_plan(small_spec)
    for url in ("/", plan.get_absolute_url(), "/validation/", "/sweeps/new/"):
        head = client.head(url)
        assert head.status_code == 200 and head.content == b"", url


def test_plotly_js_is_served_from_the_installed_plotly_package():
    import plotly

    found = finders.find("plotly/plotly.min.js")
    assert found and found.startswith(str(plotly.__path__[0]))
    assert not finders.find("plotly/widgetbundle.js")


def test_a_done_plan_shows_its_launch_configs_with_copy_buttons(client, small_spec, seeded):
    plan = services.plan_run(plan_id=make_plan(small_spec, top=3).pk)
    assert plan.status == "done", plan.error
    page = client.get(plan.get_absolute_url()).content.decode()
    for framework in ("megatron", "torchtitan", "deepspeed", "slurm"):
        assert f'id="launch-text-{framework}"' in page and f'data-copy="launch-text-{framework}"' in page
    assert "/static/webui/copy." in page and "For layout #1" in page
    second = plan.result["plans"][1]
    page = client.get(plan.get_absolute_url() + "?rank=2").content.decode()
    assert "For layout #2" in page and f"plan #2: {second['label']}" in page
    page = client.get(plan.get_absolute_url() + "?rank=9").content.decode()
    assert 'id="launch-error"' in page and "rank: must be between 1 and 3" in page and "For layout #1" in page
    # The link to share is the plan's, not this address with its refused ?rank=9.
    assert f'id="share-link">http://testserver{plan.get_absolute_url()}</a>' in page and "?rank=9</a>" not in page


def test_a_one_token_one_sequence_request_is_told_what_helps(client, seeded):
    doc = {"model": {"name": "tiny", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1, "ffn_hidden": 8, "vocab": 1,
                     "seq_len": 1}, "training": {"global_batch": 1},
           "cluster": {"num_gpus": 8, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"}}
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert plan.result["rejected_examples"]["dp_does_not_divide_batch"] == (
        "DP=8 does not divide the global batch of 1 sequence")  # not "1 sequences"
    # The commonest reason that is not the search trimming its own candidates (CP over a 1-token sequence, where
    # CP 1 is searched too) says what helps.
    real = [reason for reason, _ in services.by_count(plan.result["rejected"]) if reason not in services.PIN_REASONS]
    assert "cp_does_not_split_sequence" in plan.result["rejected"] and real
    page = html.unescape(client.get(plan.get_absolute_url()).content.decode())
    assert f"What usually helps: {services.NO_LAYOUT_ADVICE[real[0]]}." in page


def test_an_unpinned_request_that_fits_nowhere_is_told_of_memory_not_of_the_searchs_own_trims(client, seeded):
    """Llama 3.1 405B on 64 H100s, nothing pinned: most rejections are ZeRO-3 beside PP, which the search tries and
    drops itself; the advice was "ZeRO 0 or 1 with pipeline parallelism", not memory."""
    doc = {"model": "Llama 3.1 405B", "training": {"global_batch": 64},
           "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100",
                       "fabric": "NDR InfiniBand fat tree"}}
    plan = services.plan_run(plan_id=make_plan(doc).pk)
    assert not plan.result["plans"] and plan.result["rejected"]["out_of_memory"] > 1000
    page = html.unescape(client.get(plan.get_absolute_url()).content.decode())
    assert f"What usually helps: {services.NO_LAYOUT_ADVICE['out_of_memory']}." in page


def test_every_no_layout_advice_is_for_a_reason_the_engine_gives():
    from pathlib import Path

    import planner

    source = "".join(p.read_text() for p in Path(planner.__file__).parent.glob("*.py"))
    assert [key for key in services.NO_LAYOUT_ADVICE if f'"{key}"' not in source] == []
    # ... and every reason the engine returns has advice of its own: a request whose commonest reason was the
    # sequence CP cannot split was told "more GPUs", the opposite of what helps.
    given = set(re.findall(r'(?:return |rejected\.add\()"([a-z]+(?:_[a-z]+)+)",', source))
    assert len(given) >= 15 and given - set(services.NO_LAYOUT_ADVICE) == set()


def test_the_favicon_is_no_content_not_a_404(client):
    """The admin's pages name no icon, so browsers ask for /favicon.ico; its 404 was a console error on each."""
    response = client.get("/favicon.ico")
    assert response.status_code == 204 and response["Cache-Control"] == "max-age=86400"


def test_the_ranked_table_writes_each_column_in_one_unit(client, seeded, small_spec):
    # "984.0 ms" sat above "1.017 s", and times to train read "3.96 days", "4 days", "4.1 days".
    result = {"plans": [{"rank": i + 1, "label": f"L{i}", "step_time_s": step, "time_to_train_s": days * 86400}
                        for i, (step, days) in enumerate([(0.984, 3.96), (1.017, 4.0), (1.2, 4.1)])]}
    rows = services.plan_ranked_rows(plan=Plan(result=result, status=Plan.Status.DONE))
    assert [(r["step_time"], r["time_to_train"]) for r in rows] == [
        ("0.9840 s", "3.96 days"), ("1.017 s", "4.00 days"), ("1.200 s", "4.10 days")]
    plan = services.plan_run(plan_id=make_plan(small_spec, top=3).pk)
    page = client.get(plan.get_absolute_url()).content.decode()
    table = page[page.index('id="ranked"'):page.index("</table>", page.index('id="ranked"'))]
    for row in services.plan_ranked_rows(plan=plan):
        assert f"<td>{row['step_time']}</td>" in table and f"<td>{row['time_to_train']}</td>" in table


def test_a_form_posted_with_a_stale_security_token_says_to_submit_again(seeded):
    # Logging into the admin in another tab renews the token: the open form's submit got Django's bare
    # "403 Forbidden - CSRF verification failed".
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/sweeps/new/", {"model": "Llama 3 8B"})
    page = response.content.decode()
    assert response.status_code == 403 and "<h1>Please submit again</h1>" in page
    assert "Go back and submit it again; what you typed is still in it." in page and "CSRF" not in page
    response = strict.delete("/")
    assert response.status_code == 403 and "<h1>Not allowed</h1>" in response.content.decode()
