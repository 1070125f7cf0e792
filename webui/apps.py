from django.apps import AppConfig


class WebuiConfig(AppConfig):
    name = "webui"
    verbose_name = "Placement planner"
    default_auto_field = "django.db.models.BigAutoField"
