"""Validates JSON against JSON Schemas for tests/schemas.rs: one process for every document.

Reads one JSON object on stdin: {"task": "sarif", "schema", "logs"} or
{"task": "x-rate-limit", "schema", "specs": [{"spec", "verdict", "findings", "document"}]}.
Exits 0 when every expectation holds, 1 with a report otherwise. A missing jsonschema is a
failure, never a skip: install it with pip (.ci/test does).
"""

import json
import re
import sys

try:
    import jsonschema
except ImportError:
    print("python's jsonschema is not installed: run `python3 -m pip install jsonschema` (.ci/test does)")
    sys.exit(1)

# Errors `check` reports inside an x-rate-limit value that a JSON Schema cannot express, each
# with why. A value whose only errors are these is accepted by the schema; any other field error
# the schema accepts fails the test.
INEXPRESSIBLE = [
    (r"so no request could ever pass|could never pass",
     "cost, burst and max-cost against the limit or burst: one field compared with another's number"),
    (r"window .* is (below the minimum|above the maximum)",
     "a window's length (PT1S to P1D) is a sum over its units (PT0.5S, PT23H60M1S, P1DT1S): a pattern could only enumerate it unreadably"),
    (r"names no policy in x-rate-limit-policies",
     "use names a policy defined elsewhere in the document: a cross-reference"),
    (r"unknown time zone",
     "an IANA zone name: the list of zones is not in the schema"),
    (r"two bounds here are named .*; names must differ",
     "names unique among a list's bounds: a rule over several values (uniqueItems compares whole items)"),
]


def pointer(path):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def walk(value, at=""):
    """Every x-rate-limit and x-rate-limit-policies value in a document, with its pointer."""
    if isinstance(value, dict):
        for key, v in value.items():
            here = at + "/" + key.replace("~", "~0").replace("/", "~1")
            if key in ("x-rate-limit", "x-rate-limit-policies"):
                yield here, key, v
            yield from walk(v, here)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, f"{at}/{i}")


def rejects(definitions, values, w, p, document_errors):
    """Whether the schema rejects the bound a finding at `p` is about, inside the extension at `w`:
    that very entry or policy when the finding is inside one (not merely another entry of the same
    list), else the value where it stands in the document (a misplaced extension)."""
    key, value = next((k, v) for at, k, v in values if at == w)
    rest = p[len(w):].split("/")[1:]
    if key == "x-rate-limit" and isinstance(value, list) and rest and rest[0].isdigit():
        return not definitions["entry"].is_valid(value[int(rest[0])])
    if key == "x-rate-limit" and isinstance(value, dict):
        # One bound: rejected as an entry, or where it stands (misplaced).
        return not definitions["entry"].is_valid(value) or bool(document_errors_at(document_errors, w))
    if key == "x-rate-limit-policies" and isinstance(value, dict) and rest:
        name = rest[0].replace("~1", "/").replace("~0", "~")
        return not definitions["bound"].is_valid(value[name])
    return bool(document_errors_at(document_errors, w))


def document_errors_at(errors, w):
    return [e for e in errors if e == w or e.startswith(w + "/")]


def sarif(task, problems):
    cls = jsonschema.validators.validator_for(task["schema"])
    cls.check_schema(task["schema"])
    validator = cls(task["schema"])
    for i, log in enumerate(task["logs"]):
        for e in validator.iter_errors(log):
            problems.append(f"sarif log {i}: {pointer(e.absolute_path)}: {e.message}")
        if not log["runs"][0]["results"] and not log["runs"][0]["invocations"][0]["toolExecutionNotifications"]:
            problems.append(f"sarif log {i}: no results: the test checks nothing")
    print(f"{len(task['logs'])} SARIF logs valid against {task['schema'].get('id', 'the schema')}")


def x_rate_limit(task, problems):
    schema = task["schema"]
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#", schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    document_validator = jsonschema.Draft7Validator(schema)
    definitions = {
        name: jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": schema["definitions"]})
        for name in ("entry", "bound")
    }
    accepted = rejected = 0
    inexpressible = {}
    for spec in task["specs"]:
        name, document = spec["spec"], spec["document"]
        errors = [pointer(e.absolute_path) for e in document_validator.iter_errors(document)]
        values = list(walk(document))
        if spec["verdict"] == "valid":
            for e in document_validator.iter_errors(document):
                problems.append(f"{name}: check accepts it, the schema rejects {pointer(e.absolute_path)}: {e.message}")
            accepted += len(values)
            continue
        for finding in spec["findings"]:
            if finding["severity"] != "error":
                continue
            p = finding["pointer"]
            inside = [w for w, _, _ in values if p == w or p.startswith(w + "/")]
            if not inside:
                continue  # not a field of an extension: a $ref, the counter budget, the document
            w = max(inside, key=len)
            if rejects(definitions, values, w, p, errors):
                rejected += 1
                continue
            why = next((why for pattern, why in INEXPRESSIBLE if re.search(pattern, finding["message"])), None)
            if why is None:
                problems.append(f"{name}: check reports `{p}: {finding['message']}`, the schema accepts {w}")
            else:
                inexpressible.setdefault(why, []).append(f"{name} {p}")
    print(f"schema: {accepted} x-rate-limit values check accepts, all accepted; {rejected} field errors, all rejected")
    for why, where in inexpressible.items():
        print(f"not expressible in JSON Schema ({why}): {', '.join(where)}")


def main():
    task = json.load(sys.stdin)
    problems = []
    {"sarif": sarif, "x-rate-limit": x_rate_limit}[task["task"]](task, problems)
    if problems:
        print("\n".join(problems))
        sys.exit(1)


main()
