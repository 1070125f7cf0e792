import json
from pathlib import Path

from django.db import migrations, models

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpus.json"


def fill_shipped_values(apps, schema_editor):
    """Catalog rows seeded before this field existed get the shipped figure (fixtures/gpus.json) for their GPU;
    rows of other names stay empty, which the engine reads as attention_efficiency."""
    try:
        rows = json.loads(FIXTURE.read_text())
    except (OSError, ValueError):
        return
    gpu_type = apps.get_model("webui", "GPUType")
    for row in rows:
        fields = row.get("fields") or {}
        value = fields.get("cudnn_attention_efficiency")
        if row.get("model") == "webui.gputype" and value is not None:
            gpu_type.objects.filter(name=fields.get("name"), cudnn_attention_efficiency__isnull=True) \
                .update(cudnn_attention_efficiency=value)


class Migration(migrations.Migration):

    dependencies = [
        ('webui', '0005_plan_option_sources'),
    ]

    operations = [
        migrations.AddField(model_name='gputype', name='cudnn_attention_efficiency',
                            field=models.FloatField(blank=True, null=True)),
        migrations.RunPython(fill_shipped_values, migrations.RunPython.noop),
    ]
