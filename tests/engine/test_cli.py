"""The command line: JSON and table output, clear errors without tracebacks."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from planner import accuracy
from planner.accuracy import DEFAULT_CONFIGS

from .conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *args], cwd=ROOT, input=stdin, text=True,
                          capture_output=True, timeout=120)


def test_plan_prints_the_answer_as_json():
    out = run("plan", str(EXAMPLES / "llama3-70b-h100-512-pinned.json"), "--top", "3")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert len(answer["plans"]) == 3 and answer["plans"][0]["layout"]["tp"] == 8


def test_plan_prints_a_table():
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--format", "table", "--top", "2")
    assert out.returncode == 0, out.stderr
    assert "best: TP" in out.stdout and "rejected:" in out.stdout and "tp_crosses_nvlink_domain" in out.stdout


def test_the_table_keeps_its_columns_under_long_labels_and_groups_digits():
    """The GB200 example's plans include "... SP ZeRO-1 PP inside DP" (47 characters, over the layout column's 46):
    every row's step time still ends under the header's, and counts read with thousands separators."""
    out = run("plan", str(EXAMPLES / "gb200-nvl72-405b.json"), "--format", "table", "--top", "5")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if "step s" in line)
    rows = [line for line in lines if line[:5].strip().lstrip("~").isdigit()]
    assert len(rows) == 5 and any(len(line.split("  ")[2].strip()) > 46 for line in rows if "PP inside DP" in line)
    end = header.index("step s") + len("step s")
    # Step times to four significant digits, as the pages write them (9.996, 10.03)
    steps = [row[end - 9:end].strip() for row in rows]
    assert all(re.fullmatch(r"\d+\.\d+", s) and len(s.replace(".", "").lstrip("0")) == 4 for s in steps), steps
    assert all(row[end] == " " for row in rows)
    tokens_end = header.index("tokens/s") + len("tokens/s")
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})+", row[tokens_end - 13:tokens_end].strip()) for row in rows)
    assert lines[0].startswith("Llama 3.1 405B: 405.9B parameters, 4,608 x GB200")
    assert re.match(r"searched \d{1,3}(,\d{3})+ layouts, \d{1,3}(,\d{3})+ feasible", lines[1])
    assert re.search(r"^ +\d{1,3},\d{3}  zero_with_pipeline: e\.g\. ", out.stdout, re.M)


def test_the_table_writes_time_to_train_as_the_plan_page_does():
    # "1.5e+13 tokens: 411.6 days, 5.06e+06 GPU-hours"; an hour-long run was "0.0 days".
    out = run("plan", str(EXAMPLES / "llama3-70b-h100-512-pinned.json"), "--format", "table", "--top", "1")
    line = next(x for x in out.stdout.splitlines() if x.startswith("time to train"))
    assert re.fullmatch(r"time to train 15T tokens: \d{3} days, \d,\d{3},\d{3} GPU-hours", line), line


def test_the_table_counts_one_layout_in_the_singular(tmp_path):
    doc = json.loads((EXAMPLES / "llama3-70b-h100-512-pinned.json").read_text())
    doc["layout"] = {"tp": 16}  # past the 8-GPU NVLink domain: one layout, rejected
    (tmp_path / "one.json").write_text(json.dumps(doc))
    out = run("plan", str(tmp_path / "one.json"), "--format", "table")
    assert out.stdout.splitlines()[1].startswith("searched 1 layout, 0 feasible"), out.stdout
    doc["layout"], doc["training"]["tokens"] = {}, 1
    (tmp_path / "one.json").write_text(json.dumps(doc))
    out = run("plan", str(tmp_path / "one.json"), "--format", "table", "--top", "1")
    assert "\ntime to train 1 token: " in out.stdout, out.stdout


def test_the_table_marks_the_layouts_the_model_cannot_tell_from_the_best():
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--format", "table", "--top", "3")
    answer = json.loads(run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--top", "3").stdout)
    order = answer["accuracy"]["ranking"]
    assert f"how far to trust the order: {order['statement']}" in out.stdout
    rows = [line.split()[0] for line in out.stdout.splitlines() if line.strip().split(" ")[0].lstrip("~").isdigit()]
    tied = {f"~{r}" for r in accuracy.ties(answer["plans"], order["tie_within"])}
    assert rows[0] == "1" and {r for r in rows if r.startswith("~")} == tied
    assert ("~ within the model's measured error of the best" in out.stdout) == bool(tied)


def test_bad_field_exits_non_zero_with_the_field_named(tmp_path):
    spec = json.loads((EXAMPLES / "gpt3-175b-a100-1024.json").read_text())
    spec["model"]["heads"] = 100
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    out = run("plan", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert "model.heads: must divide model.hidden (12288)" in out.stderr
    assert "Traceback" not in out.stderr


def test_broken_json_and_missing_files_are_clear(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": ')
    out = run("plan", str(broken))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "spec: is not valid JSON: Expecting value at line 1, column 11" in out.stderr  # whole, as the API's
    out = run("plan", str(tmp_path / "missing.json"))
    assert out.returncode == 2 and "cannot read" in out.stderr
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    out = run("plan", str(deep))
    assert out.returncode == 2 and "spec: is nested more than 32 levels deep" in out.stderr


def test_a_number_of_more_digits_than_a_float_holds_is_out_of_bounds(tmp_path):
    doc = json.loads((EXAMPLES / "gpt3-175b-a100-1024.json").read_text())
    doc["cluster"]["num_gpus"] = 10**400
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    out = run("plan", str(big))
    assert out.returncode == 2 and "cluster.num_gpus: must be at most 1048576" in out.stderr


def test_spec_from_standard_input():
    out = run("plan", "-", "--top", "1", stdin=(EXAMPLES / "gpt3-175b-a100-1024.json").read_text())
    assert out.returncode == 0 and len(json.loads(out.stdout)["plans"]) == 1


def test_bad_arguments_are_usage_errors():
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--top", "zero")
    assert out.returncode == 2 and "  --top: must be a number, not 'zero'\n" in out.stderr


@pytest.mark.parametrize("flag, value, message", [
    ("--top", "51", "--top: must be at most 50 (got 51)"), ("--top", "0", "--top: must be at least 1 (got 0)"),
    ("--rank", "51", "--rank: must be at most 50 (got 51)"), ("--rank", "1.5", "--rank: must be a whole number")])
def test_top_and_rank_have_the_apis_bounds(flag, value, message):
    # One bound for every door (planner.spec.TOP): the CLI took up to 1,000 ranked plans where the API keeps 50.
    args = ["--export", "megatron"] if flag == "--rank" else []
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), flag, value, *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: invalid options:\n")  # the option's problem, not the spec file's


def test_the_engine_imports_without_django():
    code = "import sys, planner, planner.report, planner.cli; assert not any(m.startswith('django') for m in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr


def test_validate_prints_the_error_table():
    out = run("validate", str(ROOT / "planner" / "data" / "published_runs.json"),
              "--configs", str(DEFAULT_CONFIGS))
    assert out.returncode == 0, out.stderr
    assert "sc21_t1_1008.0B" in out.stdout and "median |error|" in out.stdout


def test_validate_configs_and_no_configs_exclude_each_other():
    out = run("validate", "--configs", "x.json", "--no-configs")
    assert out.returncode == 2 and "not allowed with argument" in out.stderr


def test_validate_of_a_missing_file_is_a_clear_error(tmp_path):
    out = run("validate", str(tmp_path / "none.json"))
    assert out.returncode == 2 and "cannot read" in out.stderr and "Traceback" not in out.stderr


def test_export_prints_the_best_plans_launch_configuration():
    spec = str(EXAMPLES / "llama3-70b-h100-512-pinned.json")
    best = json.loads(run("plan", spec, "--top", "2").stdout)["plans"]
    out = run("plan", spec, "--export", "megatron")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# Megatron-LM arguments for plan #1: {best[0]['label']}\n")
    assert "  --tensor-model-parallel-size 8\n" in out.stdout
    second = run("plan", spec, "--export", "slurm", "--rank", "2")
    assert second.returncode == 0 and f"for plan #2: {best[1]['label']}" in second.stdout
    assert "#SBATCH --nodes=64" in second.stdout


@pytest.mark.parametrize("args,message", [
    (("--export", "torchtitan", "--rank", "5000"), "--rank: must be at most 50 (got 5000)"),
    (("--export", "torchtitan", "--rank", "two"), "--rank: must be a number, not 'two'"),
    (("--rank", "2"), "--rank: needs --export"),
    (("--export", "jax"), "invalid choice: 'jax'"),
])
def test_bad_export_arguments_name_the_option(args, message):
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_a_rank_past_the_plans_found_is_a_field_named_error(tmp_path):
    spec = json.loads((EXAMPLES / "llama3-70b-h100-512-pinned.json").read_text())
    spec["layout"] = {"tp": 8, "pp": 4, "dp": 16, "micro_batch": 1, "vpp": 5, "recompute": "none",
                      "sequence_parallel": True, "zero": 1, "rank_order": "tp-cp-dp-pp"}
    path = tmp_path / "one.json"
    path.write_text(json.dumps(spec))
    out = run("plan", str(path), "--export", "deepspeed", "--rank", "2")
    assert out.returncode == 2 and out.stdout == ""
    assert "--rank: must be between 1 and 1 (the feasible plans found), not 2" in out.stderr


def test_validate_prints_the_error_per_row_per_group_and_held_out():
    out = run("validate")  # no file: both reference files with the launch-script details
    assert out.returncode == 0, out.stderr
    for text in ("sc21_t1_1008.0B", "llmf_h100bf16L_70b_s2048_g512_gb4096", "by group", "F_llmfoundry_benchmarks",
                 "by GPU and precision", "H100 bf16", "all rows: median |error|", "held out: median |error|"):
        assert text in out.stdout, text
    assert "*sc21_t1_18.4B" in out.stdout  # held-out rows are marked


def test_validate_json_over_several_files(tmp_path):
    rows = json.loads((ROOT / "planner" / "data" / "published_runs.json").read_text())["cases"]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"cases": rows[:3]}))
    second.write_text(json.dumps(rows[10:12]))  # a bare list of rows is accepted too
    out = run("validate", str(first), str(second), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["id"] for r in result["rows"]] == [r["id"] for r in rows[:3] + rows[10:12]]
    assert [r["file"] for r in result["rows"]] == ["a.json"] * 3 + ["b.json"] * 2
    s = result["summary"]
    assert s["rows"] == 5 and s["modelled"] == 5
    assert s["median_abs_err"] == sorted(abs(r["err"]) for r in result["rows"])[2]
    assert set(result["groups"]) == {"A_sc21_table1_weak_scaling", "A3_megatron_readme_2020"}


def test_validate_search_adds_the_claimed_gain(tmp_path):
    rows = json.loads((ROOT / "planner" / "data" / "published_runs.json").read_text())["cases"]
    path = tmp_path / "one.json"
    path.write_text(json.dumps([r for r in rows if r["id"] == "meg2020_a100_2B"]))
    out = run("validate", str(path), "--json", "--search")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    gain = result["rows"][0]["search_gain"]
    assert gain >= 0 and result["summary"]["median_search_gain"] == gain
    kept = result["rows"][0]["search_gain_same_options"]
    assert 0 <= kept <= gain and result["summary"]["median_search_gain_same_options"] == kept
    table = run("validate", str(path), "--search")
    assert "median search gain" in table.stdout and "with the runs' options kept" in table.stdout
    assert table.stdout.splitlines()[0].split()[9:11] == ["gain", "kept"]


def test_validate_input_errors_name_the_argument(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"cases": [')
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"runs": []}')
    cases = [((str(broken),), f"runs: {broken}: invalid JSON at line 1"),
             ((str(wrong),), f"runs: {wrong}: expected an object with 'cases'"),
             ((str(wrong), "--configs", str(broken)), f"configs: {broken}: invalid JSON"),
             ((str(tmp_path / "missing.json"),), "runs: cannot read"),
             ((str(wrong), "--configs", str(tmp_path / "none.json")), "configs: cannot read")]
    for args, message in cases:
        out = run("validate", *args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_reader_that_stops_early_ends_the_command_quietly():
    # `python -m planner plan SPEC --top 50 | head -n 1`, with a real pipe: head exits after one line while the
    # command still has most of its answer to write (50 plans' JSON is far more than a pipe's 64 KiB buffer).
    spec = EXAMPLES / "gpt3-175b-a100-1024.json"
    out = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" -m planner plan "$1" --top 50 | head -n 1',
                          sys.executable, str(spec)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout == "{\n"
    assert out.stderr == ""  # no BrokenPipeError, no traceback
    assert out.returncode == 141  # as `yes | head` ends under pipefail: stopped by the closed pipe


@pytest.mark.parametrize("args", [("validate", "planner/data/published_runs.json"), ("catalog",)])
def test_every_command_ends_quietly_on_a_closed_pipe(args):
    proc = subprocess.Popen([sys.executable, "-m", "planner", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.communicate(timeout=120)[1].decode()
    assert stderr == "" and proc.returncode == 141


def test_a_pipe_closed_before_anything_is_written_ends_quietly_too():
    proc = subprocess.Popen([sys.executable, "-m", "planner", "plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"),
                             "--format", "json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the search ends
    stderr = proc.communicate(timeout=120)[1].decode()
    assert stderr == "" and proc.returncode == 141


def test_the_table_names_the_training_stack_and_how_the_model_does_on_its_runs(tmp_path):
    doc = json.loads((EXAMPLES / "gpt3-175b-a100-1024.json").read_text())
    doc["training"]["framework"] = "torchtitan"
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    out = run("plan", str(path), "--format", "table", "--top", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("(DGX A100, HDR InfiniBand), training stack torchtitan")
    assert any(line.startswith("  On published runs of the torchtitan stack: ±") for line in lines)
    assert "training stack" not in run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--format", "table",
                                       "--top", "1").stdout.splitlines()[0]


@pytest.mark.parametrize("text, message", [
    (None, "--catalog: cannot read"), ("{}", "must be a list of fixture rows"), ("[1]", "row 1 is not an object"),
    ('[{"model": "webui.gputype", "fields": {}}]', 'row 1 (webui.gputype) has no "fields" object with a "name"'),
    ("[", "--catalog:")])
def test_a_bad_catalog_file_is_named(tmp_path, text, message):
    path = tmp_path / "catalog.json"
    if text is not None:
        path.write_text(text)
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--catalog", str(path))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_catalog_row_the_field_tables_refuse_is_named_by_its_row(tmp_path):
    # It was said as the spec's own fields ("model.layers: must be a number"), as if the spec were wrong.
    rows = [{"model": "webui.modelpreset", "fields": {"name": "Broken", "layers": "x", "hidden": 4096, "heads": 32,
                                                      "vocab": 32000, "seq_len": 4096}}]
    (tmp_path / "catalog.json").write_text(json.dumps(rows))
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), "--catalog", str(tmp_path / "catalog.json"))
    assert out.returncode == 2
    assert "--catalog: " in out.stderr and "row 1 (webui.modelpreset 'Broken'): layers: must be a number, not 'x'" \
        in out.stderr


@pytest.mark.parametrize("flag, values", [("--top", ("5", "7")), ("--rank", ("1", "2")), ("--catalog", ("a", "b"))])
def test_an_option_given_twice_is_a_usage_error(flag, values):
    out = run("plan", str(EXAMPLES / "gpt3-175b-a100-1024.json"), flag, values[0], flag, values[1])
    assert out.returncode == 2 and f"{flag} is given more than once" in out.stderr and out.stdout == ""
