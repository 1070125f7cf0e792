"""Short function views: a form or a lookup, one service call, a redirect or a render. Logic is in services."""
from __future__ import annotations

import functools
import math
import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from planner import SpecError, jsonio, stacks
from planner.spec import TOP, as_number, parse_top

from . import charts, services, validation_charts
from .forms import PlanForm, initial_for
from .models import Plan


@require_http_methods(["GET", "HEAD", "POST"])
def plan_new(request: HttpRequest) -> HttpResponse:
    catalog = services.catalog_as_dict()
    if request.method == "POST":
        form = PlanForm(request.POST, catalog=catalog)
        if form.is_valid():
            plan = services.plan_create(spec=form.spec, sources=form.option_sources)
            return redirect(plan)
        copied, missing = None, ""
    else:
        asked = request.GET.get("from")
        copied = Plan.objects.filter(code=asked).first() if _is_uuid(asked) else None
        # said on the page, not a blank form alone; printable (a NUL or a control character went into the HTML)
        missing = "".join(c if c.isprintable() else "?" for c in asked) if asked and copied is None else ""
        form = PlanForm(catalog=catalog, initial=initial_for(catalog, copied.spec if copied else None))
    return render(request, "webui/plan_form.html",
                  {"form": form, "catalog": catalog, "copied": copied, "copy_missing": missing})


@require_safe
def plan_detail(request: HttpRequest, code: str) -> HttpResponse:
    plan = get_object_or_404(Plan, code=code)
    context: dict[str, Any] = {"plan": plan, "figures": charts.plan_figures(plan.result),
                               "options": services.plan_options(plan=plan)}
    if plan.status == Plan.Status.DONE:
        context["ranked"] = services.plan_ranked_rows(plan=plan)
        context["accuracy"] = services.plan_accuracy(plan=plan)
        context["ties"] = services.plan_ties(plan=plan, stated=context["accuracy"])
        context["no_layout_advice"] = services.plan_no_layout_advice(result=plan.result)
        context["peak_note"] = services.plan_peak_note(plan=plan)
    if plan.status == Plan.Status.QUEUED:
        context["queue_position"] = services.plan_queue_position(plan=plan)
    try:
        context["launch"] = services.plan_launch(plan=plan, rank=_rank(request))
    except SpecError as err:
        context["launch_error"] = "; ".join(f"{k}: {m}" for k, ms in err.as_dict().items() for m in ms)
        context["launch"] = services.plan_launch(plan=plan)
    return render(request, "webui/plan_detail.html", context)


@require_POST
def plan_retry(request: HttpRequest, code: str) -> HttpResponse:
    plan = get_object_or_404(Plan, code=code)
    return redirect(services.plan_retry(plan=plan))


@require_safe
def validation(request: HttpRequest) -> HttpResponse:
    context = services.validation_read()
    context["figures"] = validation_charts.validation_figures(context["validation"])
    # The groups whose runs state a peak memory, for the memory line (most state none).
    groups = (context["validation"] or {}).get("groups", {})
    context["memory_groups"] = [(name, f) for name, f in groups.items() if f.get("memory_rows")]
    context["search_by_source"] = services.validation_search_by_source(context["validation"])
    context["by_stack"] = services.validation_by_stack(context["validation"])
    return render(request, "webui/validation.html", context)


def favicon(request: HttpRequest) -> HttpResponse:
    """No icon, said without an error: browsers ask for /favicon.ico on every page that names none (the admin's
    pages), and the 404 was a console error on each."""
    response = HttpResponse(status=204)
    response["Cache-Control"] = "max-age=86400"
    return response


# ---------------------------------------------------------------------------------------------------------
# JSON API


def api_methods(*methods: str, query: tuple[str, ...] | None = None):
    """An API view's allowed methods; any other gets a JSON 405 naming them (not Django's empty 405, nor, for a
    DELETE or PUT, the CSRF failure page: the API keeps no session, so it is CSRF-exempt throughout). A query
    parameter a view that reads some (`query` lists them) does not read is a 400 naming it, as an unknown key of a
    spec is: "?tpo=3" was ignored, and the plan kept 10 layouts. Views that read none leave a cache-buster be."""
    def wrap(view):
        @csrf_exempt
        @functools.wraps(view)
        def checked(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method not in methods:
                response = _errors({"method": [f"{request.method[:20]} is not allowed here; use "
                                               f"{' or '.join(methods)}"]}, status=405)
                response["Allow"] = ", ".join(methods)
                return response
            unknown = [key for key in request.GET if key not in query] if query is not None else []
            if unknown:
                return _errors({"query": [f"unknown parameter {key[:40]!r} (known: {', '.join(query)})"
                                          for key in unknown[:5]]})
            return view(request, *args, **kwargs)
        return checked
    return wrap


# CSRF-exempt so that scripts can post without a session; requiring a JSON content type keeps browsers from
# posting here across sites without a CORS preflight, which this app never answers (README, "Security").
@api_methods("POST", query=("top",))
def api_plans(request: HttpRequest) -> JsonResponse:
    if (problem := body_problem(request)) is not None:
        return _errors({"spec": [problem[0]]}, status=problem[1])
    try:
        data = jsonio.loads(request.body)
    except RequestDataTooBig:
        return _errors({"spec": [jsonio.TOO_LARGE]}, status=413)
    except ValueError as err:  # not JSON, or not UTF-8
        return _errors({"spec": [jsonio.error_text(err)]})
    try:
        top = _top(request)
        spec = services.spec_parse(data=data)
    except SpecError as err:
        return _errors(err.as_dict())
    plan = services.plan_create(spec=spec, top=top, sources=services.spec_option_sources(data=data))
    body = {"code": str(plan.code), "url": request.build_absolute_uri(plan.get_absolute_url()), "status": plan.status}
    if plan.reused_from is not None:
        # As GET /api/plans/<code> gives it: one shape for one key (the POST gave only the link).
        body["reused_from"] = {"code": str(plan.reused_from.code),
                               "url": request.build_absolute_uri(plan.reused_from.get_absolute_url())}
    return JsonResponse(body, status=201)


@api_methods("GET", "HEAD", query=("rank",))
def api_plan(request: HttpRequest, code: str) -> JsonResponse:
    plan = get_object_or_404(Plan, code=code)
    try:
        data = services.plan_as_dict(plan=plan, launch_rank=_rank(request))
    except SpecError as err:
        return _errors(err.as_dict())
    data["url"] = request.build_absolute_uri(data["url"])
    if "reused_from" in data:
        data["reused_from"]["url"] = request.build_absolute_uri(data["reused_from"]["url"])
    return JsonResponse(data)


@api_methods("GET", "HEAD")
def api_catalog(request: HttpRequest) -> JsonResponse:
    return JsonResponse(services.catalog_for_api())


@api_methods("GET", "HEAD")
def api_stacks(request: HttpRequest) -> JsonResponse:
    """The training stacks a request may name (training.framework), with the settings each fills and their sources."""
    return JsonResponse(stacks.describe())


# ---------------------------------------------------------------------------------------------------------
# Errors: JSON under /api/, pages elsewhere; never a stack trace.


# In the shape of every other API error ({"errors": {field: [messages]}}), so a client reads one shape.
def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return _errors({"url": [f"no plan, sweep or endpoint at {request.path[:200]}"]}, status=404)
    return render(request, "webui/404.html", status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """A request Django refuses before any view reads it (settings: DATA_UPLOAD_MAX_MEMORY_SIZE and
    DATA_UPLOAD_MAX_NUMBER_FIELDS): said as such, where Django's own page said "Bad Request (400)" and nothing more."""
    if isinstance(exception, RequestDataTooBig):
        heading, message, status = "Too large", f"The request {jsonio.TOO_LARGE}.", 413
    elif isinstance(exception, TooManyFieldsSent):
        heading, status = "Too many fields", 400
        message = f"The request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} form fields (the plan form " \
                  f"has about 100)."
    else:
        heading, message, status = "Bad request", "The request could not be read.", 400
    if request.path.startswith("/api/"):
        return _errors({"request": [message]}, status=status)
    return render(request, "webui/400.html", {"heading": heading, "message": message}, status=status)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form posted with a security token that no longer holds (settings.CSRF_FAILURE_VIEW): logging into the
    admin in another tab renews it, and Django's own page said only "CSRF verification failed". PUT, PATCH and
    DELETE on a page (no form sends them) get the same page."""
    if request.method not in ("POST",):
        message = f"{request.method[:20]} is not something a page here takes; forms post."
        return render(request, "webui/400.html", {"heading": "Not allowed", "message": message}, status=403)
    message = ("This form's security token is out of date: you logged in or out in another tab, or the page was "
               "open for long. Go back and submit it again; what you typed is still in it.")
    return render(request, "webui/400.html", {"heading": "Please submit again", "message": message}, status=403)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return _errors({"server": ["internal error; the plan, if saved, is kept"]}, status=500)
    return render(request, "webui/500.html", status=500)


def body_problem(request: HttpRequest) -> tuple[str, int] | None:
    """Why the API does not read this body, and the status that says it: by its Content-Type (415), it reads
    JSON, which is UTF-8 (RFC 8259, section 8.1; a body declared in another charset was read as UTF-8 all the
    same); sent in chunks without a length (411, RFC 9110 section 15.5.12), which Django's WSGI request reads as
    empty: the message had said "is empty"."""
    if request.content_type != "application/json":
        return "must be sent as Content-Type: application/json", 415
    charset = str(request.content_params.get("charset", "utf-8")).strip().strip('"').lower()
    if charset not in ("utf-8", "utf8"):
        return f"must be sent in UTF-8, as JSON is (RFC 8259), not charset={charset[:20]}", 415
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not request.META.get("CONTENT_LENGTH"):
        return ("was sent in chunks (Transfer-Encoding: chunked), which this server does not read: send it with a "
                "Content-Length (curl: --data-binary @FILE, without a Transfer-Encoding header)"), 411
    return None


def _errors(errors: dict[str, list[str]], status: int = 400) -> JsonResponse:
    return JsonResponse({"errors": errors}, status=status)


def _top(request: HttpRequest) -> int:
    """?top=N, the ranked layouts to keep, within the engine's bounds (planner.spec.TOP, as the CLI's --top);
    the default when absent. Anything else is a SpecError naming `top`, as is `top` given twice (which one?)."""
    return _ranked("top", request) or TOP.default


def _rank(request: HttpRequest) -> int:
    """?rank=N, which ranked layout's launch configurations to show, read as the CLI reads --rank (the bounds of
    `top`; given twice, refused: the last one had been taken without a word); 1 when absent. A whole number past
    those bounds is passed on, for the plan to say how many layouts it holds ("must be at most 50" read as if
    the plan had 50)."""
    try:
        return _ranked("rank", request) or 1
    except SpecError:
        number = as_number(request.GET.get("rank"))
        if number is not None and math.isfinite(number) and number == int(number) and number > TOP.hi:
            return int(number)
        raise


def _ranked(name: str, request: HttpRequest) -> int | None:
    if len(request.GET.getlist(name)) > 1:
        raise SpecError.one(name, "is given more than once")
    return parse_top(request.GET[name], name) if name in request.GET else None


def _is_uuid(value: str | None) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
