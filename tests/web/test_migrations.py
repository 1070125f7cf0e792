"""Data migrations keep a catalog that was seeded before them: the rows get the shipped figures, nothing is lost."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE, AFTER = ("webui", "0006_gpu_cudnn_attention"), ("webui", "0007_node_host_link")


def migrate_to(target: tuple[str, str]):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_node_types_seeded_before_the_host_link_get_the_shipped_figures():
    old = migrate_to(BEFORE).get_model("webui", "NodeType")
    old.objects.all().delete()
    old.objects.create(name="GB200 NVL72 compute tray", gpus=4, nvlink_domain_gpus=72, nvlink_gbytes_per_s=1800,
                       nics=4, nic_gbits_per_s=800, nvlink_sharp=True, source="seeded by an older release")
    old.objects.create(name="DGX A100", gpus=8, nvlink_gbytes_per_s=600, nics=8, nic_gbits_per_s=200)
    old.objects.create(name="our own node", gpus=8, nvlink_gbytes_per_s=900, nics=8, nic_gbits_per_s=400)
    try:
        new = migrate_to(AFTER).get_model("webui", "NodeType")
        links = dict(new.objects.values_list("name", "host_gbytes_per_s"))
        # fixtures/nodes.json: NVLink-C2C shared by two GPUs, PCIe 4.0 x16; a row of another name keeps the default
        assert links == {"GB200 NVL72 compute tray": 450, "DGX A100": 64, "our own node": 128.0}
        assert new.objects.get(name="GB200 NVL72 compute tray").source == "seeded by an older release"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_deepseek_v3_seeded_before_router_groups_gets_its_routing():
    old = migrate_to(("webui", "0008_model_residual_streams")).get_model("webui", "ModelPreset")
    old.objects.all().delete()
    shape = dict(layers=61, hidden=7168, heads=128, vocab=129280, seq_len=4096, experts=256, top_k=8)
    old.objects.create(name="DeepSeek-V3 671B (MLA approximated as MHA)", **shape)
    old.objects.create(name="my DeepSeek-V3 copy", **shape)
    try:
        new = migrate_to(("webui", "0009_model_router_groups")).get_model("webui", "ModelPreset")
        routing = {row.name: (row.router_groups, row.router_group_top_k) for row in new.objects.all()}
        # fixtures/models.json: the shipped preset gets 8 groups, 4 a token; a row of another name keeps the default
        assert routing == {"DeepSeek-V3 671B (MLA approximated as MHA)": (8, 4), "my DeepSeek-V3 copy": (1, None)}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_plans_saved_with_a_lone_surrogate_render_again(client):
    if connection.vendor != "sqlite":
        pytest.skip("only SQLite could store one: PostgreSQL's jsonb refuses the escape")
    apps = migrate_to(("webui", "0009_model_router_groups"))
    plan_model, sweep_model = apps.get_model("webui", "Plan"), apps.get_model("webui", "Sweep")
    spec = {"model": {"name": "bad \ud800 name", "layers": 2}, "cluster": {"num_gpus": 8, "gpu": {"name": "H100"}}}
    broken = plan_model.objects.create(spec=spec, spec_hash="a" * 64, status="failed",
                                       result={"notes": ["\udfff"], "\ud801": 1})
    emoji = {"model": {"name": "llama \U0001F999", "layers": 2}, "cluster": {"num_gpus": 8, "gpu": {"name": "H100"}}}
    kept = plan_model.objects.create(spec=emoji, spec_hash="b" * 64, status="failed")
    sweep = sweep_model.objects.create(base={"model": "x\udc00"}, vary={"cluster.num_gpus": [8]},
                                       axes=["cluster.num_gpus"])
    try:
        new = migrate_to(("webui", "0010_mend_lone_surrogates"))
        plan = new.get_model("webui", "Plan").objects.get(pk=broken.pk)
        assert plan.spec["model"]["name"] == "bad \ufffd name"
        assert plan.spec["cluster"] == spec["cluster"]  # the rest is as saved
        assert plan.result == {"notes": ["\ufffd"], "\ufffd": 1}
        assert new.get_model("webui", "Plan").objects.get(pk=kept.pk).spec == emoji  # a pair is no lone half
        assert new.get_model("webui", "Sweep").objects.get(pk=sweep.pk).base == {"model": "x\ufffd"}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    page = client.get(f"/plans/{broken.code}/")
    assert page.status_code == 200
    assert "bad \ufffd name" in page.content.decode()
