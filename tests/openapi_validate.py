"""Validates OpenAPI documents with openapi-spec-validator (2.0, 3.0, 3.1), all in one process.

Usage: python3 openapi_validate.py FILE...
Prints one JSON object: each file's errors, as stable keys (the failing location and the schema
keyword for schema errors, the message for the rest), so that a test can compare the errors of
a spec before and after `opbound document` even where the messages quote whole objects.
"""

import json
import sys

import yaml
from openapi_spec_validator.shortcuts import get_validator_cls

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path):
    with open(path, encoding="utf-8") as f:
        if path.endswith(".json"):
            return json.load(f)
        return yaml.load(f, Loader=Loader)


def key(error):
    validator = getattr(error, "validator", None)
    if isinstance(validator, str):
        where = "/".join(str(p) for p in getattr(error, "absolute_path", []))
        return f"/{where}: {validator}"
    return str(getattr(error, "message", error))


def errors(path):
    try:
        spec = load(path)
        cls = get_validator_cls(spec)
        found = sorted({key(e) for e in cls(spec).iter_errors()})
    except Exception as e:  # an unreadable document is an error of its own, not a crash
        found = [f"cannot validate: {type(e).__name__}: {e}"]
    return found


print(json.dumps({path: errors(path) for path in sys.argv[1:]}, indent=1))
