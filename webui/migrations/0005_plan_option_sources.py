from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webui', '0004_gpu_constants'),
    ]

    operations = [
        migrations.AddField(
            model_name='plan',
            name='option_sources',
            field=models.JSONField(blank=True, default=dict, help_text='{spec path: "request" | "catalog" | "default"} for each modelling option (webui/options.py): set in the request, or assumed. Empty for plans saved before it was kept.'),
        ),
    ]
