"""A Flask app, on Flask's defaults, that records which route ran and with what key value.

tests/frameworks.rs starts it behind `opbound serve`: `python3 flask_app.py PORT`. It listens on
127.0.0.1:PORT with Werkzeug's server (what `flask run` and `app.run` use) and prints a line
starting with `ready` once it accepts connections. `GET /_ran` lists the records as JSON and
`DELETE /_ran` empties the list. `.ci/test` installs Flask when it is missing.
"""

import logging
import sys
import threading

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
ran = []
lock = threading.Lock()


def record(route, key=None, **params):
    # opbound appends the peer it saw to X-Forwarded-For: the last entry is the client.
    forwarded = request.headers.get("X-Forwarded-For", "")
    address = forwarded.split(",")[-1].strip() or None
    with lock:
        ran.append({"route": route, "key": key, "address": address, "params": params})
    return "ran " + route + "\n"


@app.get("/api/limited")
def limited():
    return record("limited")


@app.get("/api/items/<id>")
def items(id):
    return record("items", id=id)


@app.get("/api/items/<id>/parts/<part>")
def parts(id, part):
    return record("parts", id=id, part=part)


@app.get("/api/session")
def session():
    return record("session", request.cookies.get("sid"))


@app.get("/api/search")
def search():
    return record("search", request.args.get("key"))


@app.get("/api/keyed")
def keyed():
    return record("keyed", request.headers.get("X-Api-Key"))


@app.get("/api/token")
def token():
    # What a Flask app reads: Werkzeug parses the scheme case-insensitively, decodes Basic into
    # a username and password, and keeps a Bearer credential as `token`.
    auth = request.authorization
    key = None
    if auth is not None and auth.type == "basic":
        key = auth.username
    elif auth is not None and auth.type == "bearer":
        key = auth.token
    return record("token", key, scheme=auth.type if auth else None)


@app.post("/api/login")
def login():
    # Many apps read the body as JSON whatever its Content-Type says.
    body = request.get_json(force=True, silent=True)
    key = body.get("username") if isinstance(body, dict) else None
    return record("login", key if isinstance(key, str) else None)


@app.get("/_ran")
def list_ran():
    with lock:
        return jsonify(list(ran))


@app.delete("/_ran")
def reset_ran():
    with lock:
        ran.clear()
    return "", 204


def main():
    port = int(sys.argv[1])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(f"ready flask on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
