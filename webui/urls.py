from django.contrib import admin
from django.urls import path

from . import sweep_views, views

urlpatterns = [
    path("", views.plan_new, name="plan-new"),
    path("plans/<uuid:code>/", views.plan_detail, name="plan-detail"),
    path("plans/<uuid:code>/retry/", views.plan_retry, name="plan-retry"),
    path("validation/", views.validation, name="validation"),
    path("api/plans", views.api_plans, name="api-plans"),
    path("api/plans/<uuid:code>", views.api_plan, name="api-plan"),
    path("api/catalog", views.api_catalog, name="api-catalog"),
    path("api/stacks", views.api_stacks, name="api-stacks"),
    path("sweeps/new/", sweep_views.sweep_new, name="sweep-new"),
    path("sweeps/<uuid:code>/", sweep_views.sweep_detail, name="sweep-detail"),
    path("sweeps/<uuid:code>/csv", sweep_views.sweep_csv, name="sweep-csv"),
    path("compare/", sweep_views.plans_compare, name="plans-compare"),
    path("api/sweeps", sweep_views.api_sweeps, name="api-sweeps"),
    path("api/sweeps/<uuid:code>", sweep_views.api_sweep, name="api-sweep"),
    path("admin/", admin.site.urls),
]

handler400 = "webui.views.bad_request"
handler404 = "webui.views.not_found"
handler500 = "webui.views.server_error"
