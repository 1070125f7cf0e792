import json
from pathlib import Path

from django.db import migrations, models

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "nodes.json"


def fill_shipped_values(apps, schema_editor):
    """Catalog rows seeded before this field existed get the shipped figure (fixtures/nodes.json) for their node
    type; rows of other names keep the field's default, PCIe 5.0 x16."""
    try:
        rows = json.loads(FIXTURE.read_text())
    except (OSError, ValueError):
        return
    node_type = apps.get_model("webui", "NodeType")
    for row in rows:
        fields = row.get("fields") or {}
        value = fields.get("host_gbytes_per_s")
        if row.get("model") == "webui.nodetype" and value is not None:
            node_type.objects.filter(name=fields.get("name")).update(host_gbytes_per_s=value)


class Migration(migrations.Migration):

    dependencies = [
        ('webui', '0006_gpu_cudnn_attention'),
    ]

    operations = [
        migrations.AddField(model_name='nodetype', name='host_gbytes_per_s', field=models.FloatField(default=128.0)),
        migrations.RunPython(fill_shipped_values, migrations.RunPython.noop),
    ]
