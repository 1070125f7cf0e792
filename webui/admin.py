"""The hardware catalog in the admin: search, filters, the engine's validation, JSON export and import.

Labels, units, help and choices come from the engine's field tables, so the admin says what the form says.
"""
from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from planner import jsonio
from planner.spec import SECTIONS

from . import services
from .forms import field_label
from .models import Fabric, GPUType, ModelPreset, NodeType, Plan, Sweep, SweepScenario

_SECTION_FIELDS = {"gpu": "cluster.gpu", "node": "cluster.node", "fabric": "cluster.fabric", "model": "model"}


class ImportForm(forms.Form):
    file = forms.FileField(help_text="A JSON list of catalog rows in fixture format, as fixtures/*.json or an export.")
    update_existing = forms.BooleanField(required=False, initial=True,
                                         help_text="Overwrite rows with the same name (otherwise keep them).")


def _json_download(rows: list[dict[str, Any]], filename: str) -> HttpResponse:
    response = HttpResponse(json.dumps(rows, indent=1, ensure_ascii=False), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class CatalogAdmin(admin.ModelAdmin):
    search_fields = ("name", "source")
    actions = ["export_selected"]
    change_list_template = "admin/webui/catalog_change_list.html"

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        spec = {f.name: f for f in SECTIONS[_SECTION_FIELDS[self.model.SECTION]]}.get(db_field.name)
        if spec is not None and spec.choices:
            return forms.ChoiceField(choices=[(c, c) for c in spec.choices], label=field_label(spec), help_text=spec.help)
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if spec is not None and formfield is not None and db_field.name != "name":
            formfield.label, formfield.help_text = field_label(spec), spec.help
        return formfield

    @admin.action(description="Export selected rows as JSON")
    def export_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse:
        return _json_download(services.catalog_export(rows=queryset.order_by("pk")),
                              f"{self.model._meta.model_name}-selected.json")

    def get_urls(self):
        info = self.model._meta.app_label, self.model._meta.model_name
        return [
            path("export/", self.admin_site.admin_view(self.export_view), name="%s_%s_export" % info),
            path("import/", self.admin_site.admin_view(self.import_view), name="%s_%s_import" % info),
        ] + super().get_urls()

    def export_view(self, request: HttpRequest) -> HttpResponse:
        rows = services.catalog_export(rows=self.model.objects.order_by("pk"))
        return _json_download(rows, f"{self.model._meta.model_name}.json")

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_add_permission(request) or not self.has_change_permission(request):
            return HttpResponse(status=403)
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                rows = jsonio.loads(form.cleaned_data["file"].read())
                counts = services.catalog_import(rows=rows, update_existing=form.cleaned_data["update_existing"])
            except (ValueError, ValidationError) as err:
                problems = err.messages if isinstance(err, ValidationError) else [f"The file {jsonio.error_text(err)}"]
                form.add_error("file", problems)
            else:
                messages.success(request, "Imported: {created} created, {updated} updated, "
                                          "{unchanged} unchanged.".format(**counts))
                info = self.model._meta.app_label, self.model._meta.model_name
                return redirect(reverse("admin:%s_%s_changelist" % info))
        context = {**self.admin_site.each_context(request), "form": form, "opts": self.model._meta,
                   "title": f"Import {self.model._meta.verbose_name_plural} from JSON"}
        return render(request, "admin/webui/catalog_import.html", context)


@admin.register(GPUType)
class GPUTypeAdmin(CatalogAdmin):
    list_display = ("name", "peak_tflops", "fp8_tflops", "memory_gib", "memory_gbytes_per_s", "sm_count",
                    "price_per_gpu_hour_usd")
    list_filter = ("memory_gib", "sm_count")


@admin.register(NodeType)
class NodeTypeAdmin(CatalogAdmin):
    list_display = ("name", "gpus", "nvlink_domain_gpus", "nvlink_gbytes_per_s", "nics", "nic_gbits_per_s",
                    "nvlink_sharp", "host_gbytes_per_s")
    list_filter = ("gpus", "nvlink_sharp", "nvlink_domain_gpus")


@admin.register(Fabric)
class FabricAdmin(CatalogAdmin):
    list_display = ("name", "kind", "topology", "link_gbits_per_s", "latency_us", "oversubscription")
    list_filter = ("kind", "topology", "oversubscription")


class MixtureFilter(admin.SimpleListFilter):
    title = "architecture"
    parameter_name = "arch"

    def lookups(self, request, model_admin):
        return [("dense", "dense"), ("moe", "mixture of experts")]

    def queryset(self, request, queryset):
        if self.value() == "dense":
            return queryset.filter(experts__lte=1)
        if self.value() == "moe":
            return queryset.filter(experts__gt=1)
        return queryset


@admin.register(ModelPreset)
class ModelPresetAdmin(CatalogAdmin):
    list_display = ("name", "layers", "hidden", "heads", "kv_heads", "experts", "top_k", "seq_len")
    list_filter = (MixtureFilter, "gated_mlp")


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    """Plans are records: readable, deletable, never edited (a finished plan never changes)."""

    list_display = ("code", "title", "status", "attempts", "reused_from", "created_at", "run_time")
    list_filter = ("status",)
    search_fields = ("code", "spec_hash")
    readonly_fields = [f.name for f in Plan._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SweepScenarioInline(admin.TabularInline):
    model = SweepScenario
    fields = ("position", "values", "plan", "price_per_gpu_hour_usd")
    readonly_fields = fields
    can_delete = False
    extra = 0

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    """Sweeps are records, like plans: readable, deletable (their plans stay), never edited."""

    list_display = ("code", "title", "created_at")
    search_fields = ("code",)
    readonly_fields = [f.name for f in Sweep._meta.fields]
    inlines = [SweepScenarioInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
