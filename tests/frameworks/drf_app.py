"""A Django REST framework app for tests/spec_url.rs, in one file: drf-spectacular generates its
OpenAPI document (at /openapi.json), where /search carries x-rate-limit through
@extend_schema(extensions=...). Run: python3 drf_app.py PORT"""

import sys

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="tests-only",
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework", "drf_spectacular"],
    REST_FRAMEWORK={"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"},
    SPECTACULAR_SETTINGS={"TITLE": "drf", "VERSION": "1"},
)
django.setup()

from django.urls import path  # noqa: E402
from drf_spectacular.utils import extend_schema  # noqa: E402
from drf_spectacular.views import SpectacularJSONAPIView  # noqa: E402
from rest_framework.decorators import api_view  # noqa: E402
from rest_framework.response import Response  # noqa: E402


@extend_schema(extensions={"x-rate-limit": {"per": "route", "limit": 3, "window": "PT1H"}})
@api_view(["GET"])
def search(request):
    return Response({"ok": True})


@api_view(["GET"])
def items(request):
    return Response({"ok": True})


urlpatterns = [
    path("search", search),
    path("items", items),
    path("openapi.json", SpectacularJSONAPIView.as_view()),
]

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line([sys.argv[0], "runserver", f"127.0.0.1:{sys.argv[1]}", "--noreload", "--nothreading"])
