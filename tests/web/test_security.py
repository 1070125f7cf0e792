"""Safe to put on an internal network: deploy checks, secrets and hosts from the environment, CSRF on forms,
the admin behind a login, bounded request bodies, unguessable plan URLs, user text always escaped."""
from __future__ import annotations

import re
import secrets
import stat
import uuid

import pytest
from django.test import Client

from webui import services
from webui.models import Plan

from .conftest import ROOT, fresh_python, settings_in
from .test_forms import post_data

pytestmark = pytest.mark.django_db

PRODUCTION = {"HTTPS": "1", "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "planner.example.com",
              "CSRF_TRUSTED_ORIGINS": "https://planner.example.com"}


def test_check_deploy_is_clean_with_production_settings():
    out = fresh_python(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout


def test_a_laptop_run_is_plain_http_and_check_deploy_says_what_tls_would_add():
    out = fresh_python(["manage.py", "check", "--deploy"], {})
    warnings = sorted(set(re.findall(r"security\.W\d+", out.stdout + out.stderr)))
    assert warnings == ["security.W004", "security.W008", "security.W012", "security.W016"], out.stderr


def test_https_turns_on_redirects_secure_cookies_and_hsts():
    expression = ("s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
                  "getattr(s, 'SECURE_PROXY_SSL_HEADER', None)")
    assert settings_in(PRODUCTION, expression) == \
        "(True, True, True, 31536000, ('HTTP_X_FORWARDED_PROTO', 'https'))"
    assert settings_in({}, expression) == "(False, False, False, 0, None)"
    assert settings_in({**PRODUCTION, "SECURE_SSL_REDIRECT": "0"}, "s.SECURE_SSL_REDIRECT") == "False"


def test_secret_key_and_hosts_come_from_the_environment():
    assert settings_in(PRODUCTION, "s.SECRET_KEY == " + repr(PRODUCTION["SECRET_KEY"]) + ", s.ALLOWED_HOSTS, "
                                   "s.CSRF_TRUSTED_ORIGINS") == \
        "(True, ['planner.example.com'], ['https://planner.example.com'])"


def test_without_a_secret_key_each_checkout_makes_its_own_once(tmp_path):
    env = {"VAR_DIR": str(tmp_path)}
    first, second = settings_in(env, "s.SECRET_KEY"), settings_in(env, "s.SECRET_KEY")
    assert first == second and len(first) > 50
    key_file = tmp_path / "secret_key"
    assert repr(key_file.read_text()) == first
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert settings_in({"VAR_DIR": str(tmp_path / "other")}, "s.SECRET_KEY") != first


def test_an_unknown_host_is_refused(client, seeded):
    assert client.get("/", HTTP_HOST="evil.example.com").status_code == 400


def test_pages_forbid_framing_and_sniffing(client, seeded):
    response = client.get("/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


def test_the_form_needs_its_csrf_token(seeded):
    browser = Client(enforce_csrf_checks=True)
    data = post_data(services.catalog_as_dict())
    assert browser.post("/", data).status_code == 403
    page = browser.get("/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert browser.post("/", {**data, "csrfmiddlewaretoken": token}).status_code == 302
    assert Plan.objects.count() == 1


def test_retrying_a_plan_needs_the_csrf_token_too(seeded, small_spec):
    plan = Plan.objects.create(spec=services.spec_parse(data=small_spec).to_dict(), spec_hash="x", status="failed")
    assert Client(enforce_csrf_checks=True).post(f"/plans/{plan.code}/retry/").status_code == 403


@pytest.mark.parametrize("url", ["/admin/", "/admin/webui/plan/", "/admin/webui/gputype/add/"])
def test_the_admin_is_behind_a_login(client, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_request_bodies_are_bounded(client, seeded):
    # Said as such, not Django's bare "Bad Request (400)" page, and a body too large is a 413 as in the API.
    too_long = client.post("/", {"model__name": "x" * (1024 * 1024 + 1)})
    assert too_long.status_code == 413
    assert "The request is too large (at most 1 MiB). Nothing was saved" in too_long.content.decode()
    too_many = client.post("/", {f"field{i}": "1" for i in range(300)})
    assert too_many.status_code == 400
    assert "The request has more than 200 form fields" in too_many.content.decode()
    api = client.post("/api/plans?" + "&".join(f"f{i}=1" for i in range(300)), "{}", content_type="application/json")
    assert api.status_code == 400
    assert api.json()["errors"]["request"] == ["The request has more than 200 form fields (the plan form has about 100)."]


def test_plan_urls_are_random_uuids_never_row_numbers(client, seeded, small_spec):
    plan = services.plan_create(spec=services.spec_parse(data=small_spec))
    assert uuid.UUID(str(plan.code)).version == 4  # 122 random bits
    assert plan.get_absolute_url() == f"/plans/{plan.code}/"
    assert client.get(f"/plans/{plan.pk}/").status_code == 404
    assert client.get(f"/api/plans/{plan.pk}").status_code == 404


def test_user_text_is_escaped_on_the_plan_page(client, seeded, small_spec):
    small_spec["model"]["name"] = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    plan = services.plan_run(plan_id=services.plan_create(spec=services.spec_parse(data=small_spec)).pk)
    assert plan.status == "done", plan.error
    page = client.get(plan.get_absolute_url()).content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the title, the heading, the spec


def test_no_template_turns_escaping_off():
    templates = list((ROOT / "webui" / "templates").rglob("*.html"))
    assert templates
    for path in templates:
        text = path.read_text()
        assert "|safe" not in text and "autoescape off" not in text, path
    python = [p for p in (ROOT / "webui").rglob("*.py") if "migrations" not in p.parts]
    assert not [p for p in python if "mark_safe" in p.read_text() or "format_html" in p.read_text()]
