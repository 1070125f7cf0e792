from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webui', '0003_sweeps'),
    ]

    operations = [
        migrations.AddField(model_name='gputype', name='gemm_efficiency', field=models.FloatField(default=0.8)),
        migrations.AddField(model_name='gputype', name='fp8_gemm_efficiency', field=models.FloatField(default=0.72)),
        migrations.AddField(model_name='gputype', name='sustained_clock', field=models.FloatField(default=1.0)),
        migrations.AddField(model_name='gputype', name='hbm_efficiency', field=models.FloatField(default=0.85)),
        migrations.AddField(model_name='gputype', name='kernel_overhead_us', field=models.FloatField(default=4.0)),
        migrations.AddField(model_name='gputype', name='attention_efficiency', field=models.FloatField(default=0.55)),
        migrations.AddField(model_name='modelpreset', name='dropout', field=models.BooleanField(blank=True, null=True)),
    ]
