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
