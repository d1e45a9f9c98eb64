"""A FastAPI app for tests/spec_url.rs, serving its generated OpenAPI document at /openapi.json.

`/search` carries its bound in the document itself (`openapi_extra`); `/items` (and, in version
2, `/reports`) are bounded by the test's overlay. APP_VERSION=2 changes /search's limit and adds
/reports. /count/NAME says how many requests the app served for NAME: the app's own count, to
compare with what opbound admitted.
"""

import os

from fastapi import FastAPI

VERSION = os.environ.get("APP_VERSION", "1")
app = FastAPI(title="items", version=VERSION)
served = {}


def serve(name):
    served[name] = served.get(name, 0) + 1
    return {"served": served[name]}


@app.get(
    "/search",
    openapi_extra={"x-rate-limit": {"per": "route", "limit": 3 if VERSION == "1" else 5, "window": "PT1H"}},
)
def search():
    return serve("search")


@app.get("/items", tags=["items"])
def items():
    return serve("items")


if VERSION == "2":

    @app.get("/reports", tags=["items"])
    def reports():
        return serve("reports")


@app.get("/count/{name}")
def count(name: str):
    return {"count": served.get(name, 0)}
