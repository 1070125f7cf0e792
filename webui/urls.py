from django.contrib import admin
from django.urls import path, register_converter
from django.urls.converters import UUIDConverter

from . import sweep_views, views


class CodeConverter(UUIDConverter):
    """A plan's or sweep's code as Django's uuid converter reads it, in either case: UUIDs are case-insensitive,
    and compare took "/plans/<CODE>/" in capitals where the page itself was a 404."""

    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


register_converter(CodeConverter, "code")

urlpatterns = [
    path("", views.plan_new, name="plan-new"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("plans/<code:code>/", views.plan_detail, name="plan-detail"),
    path("plans/<code:code>/retry/", views.plan_retry, name="plan-retry"),
    path("validation/", views.validation, name="validation"),
    path("api/plans", views.api_plans, name="api-plans"),
    path("api/plans/<code:code>", views.api_plan, name="api-plan"),
    path("api/catalog", views.api_catalog, name="api-catalog"),
    path("api/stacks", views.api_stacks, name="api-stacks"),
    path("sweeps/new/", sweep_views.sweep_new, name="sweep-new"),
    path("sweeps/<code:code>/", sweep_views.sweep_detail, name="sweep-detail"),
    path("sweeps/<code:code>/csv", sweep_views.sweep_csv, name="sweep-csv"),
    path("compare/", sweep_views.plans_compare, name="plans-compare"),
    path("api/sweeps", sweep_views.api_sweeps, name="api-sweeps"),
    path("api/sweeps/<code:code>", sweep_views.api_sweep, name="api-sweep"),
    path("admin/", admin.site.urls),
]

handler400 = "webui.views.bad_request"
handler404 = "webui.views.not_found"
handler500 = "webui.views.server_error"
