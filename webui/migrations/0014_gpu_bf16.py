import json
from pathlib import Path

from django.db import migrations, models

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpus.json"


def fill_shipped_values(apps, schema_editor):
    """Catalog rows seeded before this field existed get the shipped answer (fixtures/gpus.json) for their GPU:
    "no" for the V100. Rows of other names stay empty, which the engine reads as "yes"."""
    try:
        rows = json.loads(FIXTURE.read_text())
    except (OSError, ValueError):
        return
    gpu_type = apps.get_model("webui", "GPUType")
    for row in rows:
        fields = row.get("fields") or {}
        if row.get("model") == "webui.gputype" and fields.get("bf16") is not None:
            gpu_type.objects.filter(name=fields.get("name"), bf16__isnull=True).update(bf16=fields["bf16"])


class Migration(migrations.Migration):

    dependencies = [
        ('webui', '0013_sweep_client'),
    ]

    operations = [
        migrations.AddField(model_name='gputype', name='bf16',
                            field=models.BooleanField(blank=True, null=True, verbose_name="BF16 tensor cores",
                                                      help_text="Empty: yes (Ampere and later). No for Volta "
                                                                "(V100): it trains in fp16.")),
        migrations.RunPython(fill_shipped_values, migrations.RunPython.noop),
    ]
