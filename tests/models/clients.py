"""Drives opbound with the official OpenAI and Anthropic Python SDKs, as a user's code would, and
prints what happened as one JSON line for tests/model_server.rs to judge.

Run: python3 clients.py SCENARIO BASE_URL KEY
"""

import json
import sys
import time

import anthropic
import openai

scenario, base, key = sys.argv[1], sys.argv[2], sys.argv[3]


def oa(retries=0):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=retries)


def an(retries=0):
    return anthropic.Anthropic(base_url=base, api_key=key, max_retries=retries)


def status(call):
    """The status of one SDK call: 200, or the error's status (429 from opbound)."""
    try:
        call()
        return 200
    except (openai.APIStatusError, anthropic.APIStatusError) as e:
        return e.status_code


def chat(n, budget, stream, model="m"):
    def call():
        c = oa()
        messages = [{"role": "user", "content": str(n)}]
        if stream:
            for _ in c.chat.completions.create(model=model, messages=messages, max_tokens=budget, stream=True,
                                               stream_options={"include_usage": True}):
                pass
        else:
            c.chat.completions.create(model=model, messages=messages, max_tokens=budget)
    return call


def responses(n, budget, stream):
    def call():
        c = oa()
        if stream:
            for _ in c.responses.create(model="m", input=str(n), max_output_tokens=budget, stream=True):
                pass
        else:
            c.responses.create(model="m", input=str(n), max_output_tokens=budget)
    return call


def messages(n, budget, stream):
    def call():
        c = an()
        body = dict(model="m", max_tokens=budget, messages=[{"role": "user", "content": str(n)}])
        if stream:
            with c.messages.stream(**body) as s:
                for _ in s.text_stream:
                    pass
        else:
            c.messages.create(**body)
    return call


def embeddings(words):
    return lambda: oa().embeddings.create(model="m", input=" ".join(["w"] * words))


def tokens():
    """Each API, one key each (the suffix): two requests that use more than they reserved, then a
    third whose reservation no longer fits the settled usage of the first two."""
    out = {}
    for name, make in [("chat", chat), ("responses", responses), ("messages", messages)]:
        for stream in (False, True):
            global key
            key = f"{sys.argv[3]}-{name}-{stream}"
            # 10 prompt tokens each: 30 and 50 used, 80 in all, against reservations of 30.
            out[f"{name}{'-stream' if stream else ''}"] = [
                status(make(20, 30, stream)),
                status(make(40, 30, stream)),
                status(make(0, 30, stream)),
                status(make(0, 20, stream)),
            ]
    key = f"{sys.argv[3]}-embeddings"
    # An estimate of 20, 45 used each time.
    out["embeddings"] = [status(embeddings(45)), status(embeddings(45)), status(embeddings(1)), status(embeddings(1))]
    return out


def models():
    """Chat tokens are counted per key and model: 80 used by key A on model large leaves room
    for neither another 30 there, nor takes any from key A on model small or key B on large."""
    global key
    out = {}
    a, b = f"{sys.argv[3]}-a", f"{sys.argv[3]}-b"
    key = a
    out["a-large"] = [status(chat(20, 30, True, "large")), status(chat(40, 30, False, "large"))]
    out["a-small"] = [status(chat(20, 30, True, "small")), status(chat(40, 30, False, "small"))]
    key = b
    out["b-large"] = [status(chat(20, 30, False, "large")), status(chat(40, 30, True, "large"))]
    key = a
    out["a-large"].append(status(chat(0, 30, False, "large")))
    out["a-small"].append(status(chat(0, 30, True, "small")))
    key = b
    out["b-large"].append(status(chat(0, 20, False, "large")))
    return out


def remaining(raw):
    """The tokens left as opbound told (--headers models), from a raw SDK response's headers."""
    h = raw.headers
    for name in ("x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining"):
        if h.get(name) is not None:
            return int(h[name])
    if h.get("ratelimit-remaining") is not None:
        return int(h["ratelimit-remaining"])
    for part in h.get("ratelimit", "").replace(",", ";").split(";"):
        part = part.strip()
        if part.startswith("r="):
            return int(part[2:])
    return None


def abandon():
    """Streams cut by the client before their usage (40 reserved of 100): then a request for 0
    tokens says what is left, in its head or in its refusal's."""
    global key
    out = {}
    for name in ("chat", "messages"):
        key = f"{sys.argv[3]}-{name}"
        if name == "chat":
            s = oa().chat.completions.create(model="m", messages=[{"role": "user", "content": "slow 30"}],
                                             max_tokens=40, stream=True, stream_options={"include_usage": True})
            next(iter(s))
            s.close()
        else:
            with an().messages.stream(model="m", max_tokens=40, messages=[{"role": "user", "content": "slow 30"}]) as s:
                for i, _ in enumerate(s.text_stream):
                    if i == 2:
                        break
        time.sleep(0.3)
        try:
            if name == "chat":
                raw = oa().chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "0"}], max_tokens=1)
            else:
                raw = an().messages.with_raw_response.create(model="m", max_tokens=1,
                                                             messages=[{"role": "user", "content": "0"}])
            raw.parse()
        except (openai.RateLimitError, anthropic.RateLimitError) as e:
            raw = e.response
        out[name] = remaining(raw)
    return out


def retry():
    """A bound of one request a second: the SDK's second call is refused, waits what opbound
    said, and succeeds; the provider's log has the times."""
    out = {}
    global key
    for name in ("openai", "anthropic"):
        key = f"{sys.argv[3]}-{name}"
        client = oa(retries=2) if name == "openai" else an(retries=2)
        client.models.list()
        started = time.time()
        client.models.list()
        out[name] = {"took": time.time() - started}
    return out


def headers():
    """What the SDKs can read of opbound's answers with --headers models."""
    global key
    out = {}
    key = f"{sys.argv[3]}-chat"
    raw = oa().chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "5"}], max_tokens=30)
    raw.parse()
    out["chat"] = {k: v for k, v in raw.headers.items() if "ratelimit" in k}
    # Used 15, then a reservation of 90 does not fit the 85 left: refused.
    try:
        oa().chat.completions.create(model="m", messages=[{"role": "user", "content": "5"}], max_tokens=90)
        out["refused"] = None
    except openai.RateLimitError as e:
        out["refused"] = {k: v for k, v in e.response.headers.items() if "retry" in k or "ratelimit" in k}
    key = f"{sys.argv[3]}-messages"
    raw = an().messages.with_raw_response.create(model="m", max_tokens=30, messages=[{"role": "user", "content": "5"}])
    raw.parse()
    out["messages"] = {k: v for k, v in raw.headers.items() if "ratelimit" in k}
    # A daily quota of one: the second call waits hours, and the SDK, told not to retry,
    # gives up at once (with retries allowed).
    key = f"{sys.argv[3]}-quota"
    oa(retries=2).batches.list()
    try:
        oa(retries=2).batches.list()
        out["quota"] = None
    except openai.RateLimitError as e:
        out["quota"] = {k: v for k, v in e.response.headers.items() if "retry" in k}
    return out


def spellings():
    """Issue 63: streams whose `stream` is not the literal `true` (pydantic streams on each),
    through the SDK, which sends what `extra_body` says and reads the stream it gets. Each asks
    for 1 token and uses 47 (10 of prompt, 37 generated); the next call's head says what is left.
    The client does not ask for usage: opbound must."""
    global key
    out = {}
    for stream in ["yes", 1, "1", "true", "on", "T", 1.0]:
        key = f"{sys.argv[3]}-{stream!r}"
        chunks = list(oa().chat.completions.create(model="m", messages=[{"role": "user", "content": "37"}],
                                                   max_tokens=1, stream=True, extra_body={"stream": stream}))
        usage = [c.usage for c in chunks if getattr(c, "usage", None)]
        raw = oa().chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "0"}], max_tokens=1)
        raw.parse()
        out[repr(stream)] = {"chunks": len(chunks), "usage_seen": len(usage), "left": remaining(raw)}
    return out


print(json.dumps({"spellings": spellings, "tokens": tokens, "models": models, "headers": headers, "abandon": abandon, "retry": retry}[scenario]()))
