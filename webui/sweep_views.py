"""Views for sweeps and for comparing plans: short, like webui/views.py; the work is in webui/sweeps.py and
webui/compare.py."""
from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_safe

from planner import SpecError, jsonio

from . import compare, services, sweep_charts, sweeps
from .models import Sweep
from .sweep_form import SweepForm, sweep_initial
from .views import _errors, _top, api_methods, body_problem


@require_http_methods(["GET", "HEAD", "POST"])
def sweep_new(request: HttpRequest) -> HttpResponse:
    catalog = services.catalog_as_dict()
    form = SweepForm(request.POST or None, catalog=catalog, initial=sweep_initial(catalog))
    if request.method == "POST" and form.is_valid():
        try:
            return redirect(sweeps.sweep_create(data=form.payload, client=client_address(request)))
        except SpecError as err:
            form.add_sweep_errors(err.as_dict())
        except sweeps.SweepQuotaExceeded as err:
            form.add_error(None, str(err))
            return _retry_after(render(request, "webui/sweep_form.html", {"form": form}, status=429), err)
    else:
        form.add_the_rest(sweeps.sweep_check)
    form.focus_first_error()
    return render(request, "webui/sweep_form.html", {"form": form})


def _retry_after(response: HttpResponse, err: sweeps.SweepQuotaExceeded) -> HttpResponse:
    """A 429 says when to ask again (RFC 9110, Retry-After in seconds) where the client's recent pace tells."""
    if err.retry_after_s is not None:
        response["Retry-After"] = str(err.retry_after_s)
    return response


def client_address(request: HttpRequest) -> str:
    """Who asked, for the sweep quota: the header a proxy in front sets (settings.CLIENT_ADDRESS_HEADER), else the
    connection's address."""
    header = settings.CLIENT_ADDRESS_HEADER
    if header:
        named = request.META.get("HTTP_" + header.upper().replace("-", "_"), "").split(",")[0].strip()
        if named:
            return named[:64]
    return str(request.META.get("REMOTE_ADDR") or "")[:64]


@require_safe
def sweep_detail(request: HttpRequest, code: str) -> HttpResponse:
    sweep = get_object_or_404(Sweep, code=code)
    data = sweeps.sweep_as_dict(sweep=sweep)
    figures = sweep_charts.sweep_figures(data["scenarios"], data["axes"], sweep.goal)
    # Each reason a combination was left out for, with how many: the list itself may run to hundreds of rows.
    reasons = Counter(reason for c in data["left_out"] for reason in c["reasons"]).most_common()
    return render(request, "webui/sweep_detail.html", {"sweep": sweep, "data": data, "figures": figures,
                                                      "left_out_reasons": reasons,
                                                      "fixed": sweeps.sweep_fixed(sweep=sweep,
                                                                                  rows=data["scenarios"])})


@require_safe
def sweep_csv(request: HttpRequest, code: str) -> HttpResponse:
    sweep = get_object_or_404(Sweep, code=code)
    site = request.build_absolute_uri("/").rstrip("/")
    response = HttpResponse(sweeps.sweep_csv(sweep=sweep, site=site), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="sweep-{sweep.code}.csv"'
    return response


@require_safe
def plans_compare(request: HttpRequest) -> HttpResponse:
    try:
        plans = compare.compare_plans(codes=compare.compare_codes(request.GET.getlist("plans")))
    except compare.CompareError as err:
        return render(request, "webui/compare_error.html", {"message": str(err)}, status=err.status)
    context = {"plans": plans, "sections": compare.compare_sections(plans=plans),
               "figures": compare.compare_figures(plans=plans)}
    return render(request, "webui/compare.html", context)


# ---------------------------------------------------------------------------------------------------------
# JSON API (CSRF-exempt and JSON-only, as POST /api/plans: see webui/views.py)


@api_methods("POST", query=("top",))
def api_sweeps(request: HttpRequest) -> JsonResponse:
    if (problem := body_problem(request)) is not None:
        return _errors({"sweep": [problem[0]]}, status=problem[1])
    try:
        data = jsonio.loads(request.body)
    except RequestDataTooBig:
        return _errors({"sweep": [jsonio.TOO_LARGE]}, status=413)
    except ValueError as err:
        return _errors({"sweep": [jsonio.error_text(err)]})
    try:
        sweep = sweeps.sweep_create(data=data, top=_top(request), client=client_address(request))
    except SpecError as err:
        return _errors(err.as_dict())
    except sweeps.SweepQuotaExceeded as err:
        return _retry_after(_errors({"sweep": [str(err)]}, status=429), err)
    body = {"code": str(sweep.code), "url": request.build_absolute_uri(sweep.get_absolute_url()),
            "status": sweeps.sweep_status(sweeps.sweep_rows(sweep=sweep)), "total": sweep.scenarios.count()}
    return JsonResponse(body, status=201)


@api_methods("GET", "HEAD")
def api_sweep(request: HttpRequest, code: str) -> JsonResponse:
    sweep = get_object_or_404(Sweep, code=code)
    data: dict[str, Any] = sweeps.sweep_as_dict(sweep=sweep)
    data["url"] = request.build_absolute_uri(data["url"])
    data["csv"] = request.build_absolute_uri(reverse("sweep-csv", args=[sweep.code]))
    for row in data["scenarios"]:  # whole addresses, as the sweep's and a plan's own (`best` is one of these rows)
        if row.get("url"):
            row["url"] = request.build_absolute_uri(row["url"])
    return JsonResponse(data)
