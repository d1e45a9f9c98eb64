"""A recording upstream: a Flask app under gunicorn, on their defaults but for one worker process
(so that one list holds every record) with threads (so that it keeps connections alive).

tests/differential.rs puts it behind `opbound serve` and compares what it saw with what opbound
counted: `python3 recorder_flask.py PORT` listens on 127.0.0.1:PORT and prints a line starting
with `ready` once gunicorn accepts connections. Every request is recorded when gunicorn hands it
to the app (method, target as received, version, the framing fields), before Flask routes it, and
again once its view has read its body to the end (length and SHA-256), so a request whose body
never ended, or that Flask refused itself, is seen too. It is answered with a JSON echo of the
same facts, by which a client tells its response from another's.
`GET /_seen` lists the records as JSON and `DELETE /_seen` empties the list; neither is recorded.
`.ci/test` installs Flask and gunicorn when they are missing.
"""

import hashlib
import json
import sys
import threading

from flask import Flask, Response, jsonify, request
from gunicorn.app.base import BaseApplication

app = Flask(__name__)
seen = []
lock = threading.Lock()

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@app.route("/_seen", methods=["GET", "DELETE"])
def list_seen():
    with lock:
        if request.method == "DELETE":
            seen.clear()
            return "", 204
        return jsonify(list(seen))


@app.route("/", defaults={"path": ""}, methods=METHODS)
@app.route("/<path:path>", methods=METHODS)
def echo(path):
    entry = request.environ["recorder.entry"]
    digest = hashlib.sha256()
    try:
        while True:
            chunk = request.stream.read(65536)
            if not chunk:
                break
            entry["length"] += len(chunk)
            digest.update(chunk)
    except Exception as e:  # a body cut short or badly framed: the record says so
        entry["error"] = type(e).__name__
        raise
    entry["complete"] = True
    entry["sha256"] = digest.hexdigest()
    echo = {key: entry[key] for key in ("method", "target", "length", "sha256")}
    return Response(json.dumps({"upstream": "flask", **echo}), content_type="application/json")


class Recording:
    """Records every request gunicorn hands the app, before Flask routes it: a request Flask
    refuses on its own (a WebSocket handshake to a plain route is a 400) was seen all the same."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == "/_seen":
            return self.wsgi_app(environ, start_response)
        entry = {
            "method": environ["REQUEST_METHOD"],
            # gunicorn keeps the target as it came; Werkzeug's view of it is decoded.
            "target": environ.get("RAW_URI", environ.get("PATH_INFO", "")),
            "version": environ.get("SERVER_PROTOCOL", "").removeprefix("HTTP/"),
            "content_length": environ.get("CONTENT_LENGTH") or None,
            "transfer_encoding": environ.get("HTTP_TRANSFER_ENCODING"),
            "upgrade": environ.get("HTTP_UPGRADE"),
            "complete": False,
            "length": 0,
            "sha256": None,
        }
        environ["recorder.entry"] = entry
        with lock:
            seen.append(entry)

        def recording_start_response(status, headers, exc_info=None):
            entry["status"] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        return self.wsgi_app(environ, recording_start_response)


app.wsgi_app = Recording(app.wsgi_app)


class Gunicorn(BaseApplication):
    def __init__(self, port):
        self.port = port
        super().__init__()

    def load_config(self):
        self.cfg.set("bind", f"127.0.0.1:{self.port}")
        self.cfg.set("workers", 1)
        self.cfg.set("worker_class", "gthread")
        self.cfg.set("threads", 8)
        # Longer than a test runs: an idle connection the recorder closed would race opbound's
        # next request on it, which is not what this upstream is for.
        self.cfg.set("keepalive", 60)
        self.cfg.set("loglevel", "warning")
        self.cfg.set("when_ready", lambda server: print(f"ready gunicorn on 127.0.0.1:{self.port}", flush=True))

    def load(self):
        return app


if __name__ == "__main__":
    Gunicorn(int(sys.argv[1])).run()
