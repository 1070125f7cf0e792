"""The GPU types each shipped node type holds (fixtures/nodes.json, as of this migration), filled in on databases
seeded before the column existed: `catalog seed` adds a shipped row once and never changes it afterwards. A row
whose GPU types someone has set already is left as it is, and a GPU type no longer in the catalog (deleted or
renamed in the admin) is not named."""
from django.db import migrations

SHIPPED = {
    "DGX-2 (V100)": ["V100 SXM3 32GB"],
    "DGX A100": ["A100 SXM4 40GB", "A100 SXM4 80GB"],
    "DGX H100": ["H100 SXM5 80GB", "H100 SXM5 96GB HBM2e 500W"],
    "HGX H800": ["H800 SXM5 80GB"],
    "HGX H200": ["H200 SXM 141GB"],
    "DGX B200": ["B200"],
    "GB200 NVL72 compute tray": ["GB200"],
    "AWS p5.48xlarge (H100)": ["H100 SXM5 80GB"],
    "HGX B300": ["B300"],
    "GB300 NVL72 compute tray": ["GB300"],
    "H200 NVL server (4-GPU NVLink bridges)": ["H200 NVL"],
    "AMD MI300X platform (8 GPUs)": ["AMD MI300X"],
    "AMD MI325X platform (8 GPUs)": ["AMD MI325X"],
    "AMD MI355X platform (8 GPUs)": ["AMD MI355X"],
}


def fill(apps, schema_editor):
    NodeType = apps.get_model("webui", "NodeType")
    GPUType = apps.get_model("webui", "GPUType")
    gpus = set(GPUType.objects.values_list("name", flat=True))
    for node in NodeType.objects.filter(name__in=SHIPPED, gpu_types=""):
        held = [name for name in SHIPPED[node.name] if name in gpus]
        if held:
            node.gpu_types = "\n".join(held)
            node.save(update_fields=["gpu_types"])


class Migration(migrations.Migration):

    dependencies = [
        ("webui", "0017_node_gpu_types"),
    ]

    operations = [
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
