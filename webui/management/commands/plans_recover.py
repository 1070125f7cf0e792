"""`manage.py plans_recover`: one sweep of the outbox and of lapsed leases (what every worker does on a timer).

For cron or a one-off after an outage; safe beside running workers.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand

from webui import delivery


class Command(BaseCommand):
    help = "Send plans the broker never got, requeue searches whose worker died, fail those cut off too often."

    def handle(self, *args, **options):
        counts = delivery.plans_recover()
        self.stdout.write(", ".join(f"{key} {value}" for key, value in counts.items()))
