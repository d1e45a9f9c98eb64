"""A model server for the tests: answers in OpenAI's and Anthropic's wire formats, JSON and
streamed (server-sent events), as vLLM and the providers do, and counts what it served.

What a request uses is set by the request, so the tests know it: the last message's text (or the
input) is the number of output tokens to produce ("37"); the prompt is 10 tokens. A text of
"slow N" streams N tokens 50 ms apart before its usage, for clients that hang up early.

Run: python3 provider.py PORT
"""

import asyncio
import json
import sys
import time

from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, model_validator
import uvicorn

PROMPT = 10
app = FastAPI()
served = {"requests": {}, "tokens": {}, "completed_streams": 0, "log": []}


def count(path, tokens, request):
    served["requests"][path] = served["requests"].get(path, 0) + 1
    served["tokens"][path] = served["tokens"].get(path, 0) + tokens
    key = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
    served["log"].append({"path": path, "at": time.time(), "key": key[-8:]})


def wanted(text):
    """Output tokens a message asks for, and whether to stream them slowly."""
    text = str(text).strip()
    if text.startswith("slow "):
        return int(text.split()[1]), True
    return int(text), False


def last_text(messages):
    content = messages[-1]["content"]
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    return content


def sse(obj, event=None):
    """An event as the providers write it: compact JSON on one data line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n"


@app.get("/served")
def report():
    return served


# What a broken or hostile model server answers, by name: the tests compare the bytes a client
# gets through opbound with these, and check that the reservation stands.
BAD = {
    "not-json": ("application/json", [b"<html>502 Bad Gateway</html>"]),
    "not-a-count": ("application/json", [b'{"usage": {"total_tokens": -5, "prompt_tokens": "7"}}']),
    "missing": ("application/json", [b'{"id": "x", "usage": {}}']),
    "bad-events": ("text/event-stream", [
        b"data: {not json\n\n",
        b"data: {\"usage\": {\"total_tokens\": 1.5}}\n\n",
        b": comment\r\n\r\nevent: x\ndata: [DONE]\n\n",
        b"data: {\"pad\": \"" + b"x" * (2 << 20) + b"\", \"usage\": {\"total_tokens\": 3}}\n\n",
        b"data: {\"usage\": {\"total_tok",
    ]),
}


@app.post("/v1/bad/{name}")
async def bad(name: str, request: Request):
    await request.body()
    count("bad", 0, request)
    media, parts = BAD[name]

    async def body():
        for part in parts:
            yield part
            await asyncio.sleep(0.01)

    return StreamingResponse(body(), media_type=media)


@app.get("/v1/models")
def models(request: Request):
    count("models", 0, request)
    model = {"id": "m", "object": "model", "created": 1, "owned_by": "tests", "type": "model",
             "display_name": "M", "created_at": "2025-01-01T00:00:00Z"}
    return {"object": "list", "data": [model], "has_more": False, "first_id": "m", "last_id": "m"}


@app.get("/v1/batches")
def batches(request: Request):
    count("batches", 0, request)
    return {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


class StreamOptions(BaseModel):
    include_usage: Optional[bool] = False


class ChatRequest(BaseModel):
    """The request as vLLM reads it: pydantic's lax booleans, so `"stream": "yes"` (or `1`,
    `"on"`, `"t"`) streams, and vLLM's own check on the raw body beside them."""
    model_config = ConfigDict(extra="allow")
    model: str = "m"
    messages: list
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None

    @model_validator(mode="before")
    @classmethod
    def check_stream_options(cls, data):
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return data


@app.post("/v1/chat/completions")
async def chat(request: Request, req: ChatRequest):
    served.setdefault("stream", []).append((await request.json()).get("stream"))
    body = req.model_dump()
    n, slow = wanted(last_text(body["messages"]))
    usage = {"prompt_tokens": PROMPT, "completion_tokens": n, "total_tokens": PROMPT + n}
    model = body.get("model", "m")
    if not body.get("stream"):
        count("chat", PROMPT + n, request)
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x " * n}, "finish_reason": "stop"}],
            "usage": usage,
        }
    include = (body.get("stream_options") or {}).get("include_usage", False)
    served.setdefault("include_usage", []).append(include)

    async def events():
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}
        for i in range(n):
            chunk = dict(base, choices=[{"index": 0, "delta": {"content": "x "}, "finish_reason": None}])
            if include:
                chunk["usage"] = None
            yield sse(chunk)
            if slow:
                await asyncio.sleep(0.05)
        yield sse(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}], **({"usage": None} if include else {})))
        if include:
            yield sse(dict(base, choices=[], usage=usage))
        yield "data: [DONE]\n\n"
        count("chat", PROMPT + n, request)
        served["completed_streams"] += 1

    return StreamingResponse(events(), media_type="text/event-stream")


@app.post("/v1/responses")
async def responses(request: Request):
    body = await request.json()
    text = body["input"] if isinstance(body["input"], str) else last_text(body["input"])
    n, slow = wanted(text)
    usage = {"input_tokens": PROMPT, "output_tokens": n, "total_tokens": PROMPT + n,
             "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": body.get("model", "m"),
                "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": "x " * n, "annotations": []}]}],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}
    if not body.get("stream"):
        count("responses", PROMPT + n, request)
        return response

    async def events():
        started = dict(response, status="in_progress", output=[], usage=None)
        yield sse({"type": "response.created", "sequence_number": 0, "response": started}, "response.created")
        for i in range(n):
            yield sse({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_1",
                       "output_index": 0, "content_index": 0, "delta": "x ", "logprobs": []}, "response.output_text.delta")
            if slow:
                await asyncio.sleep(0.05)
        yield sse({"type": "response.completed", "sequence_number": n + 1, "response": response}, "response.completed")
        count("responses", PROMPT + n, request)
        served["completed_streams"] += 1

    return StreamingResponse(events(), media_type="text/event-stream")


@app.post("/v1/embeddings")
async def embeddings(request: Request):
    body = await request.json()
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    tokens = sum(len(str(i).split()) for i in inputs)
    count("embeddings", tokens, request)
    data = [{"object": "embedding", "index": i, "embedding": [0.001 * j for j in range(1536)]} for i in range(len(inputs))]
    return {"object": "list", "data": data, "model": body.get("model", "m"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@app.post("/v1/messages")
async def messages(request: Request):
    body = await request.json()
    n, slow = wanted(last_text(body["messages"]))
    model = body.get("model", "m")
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": "x " * n}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": PROMPT, "output_tokens": n}}
    if not body.get("stream"):
        count("messages", PROMPT + n, request)
        return message

    async def events():
        start = dict(message, content=[], stop_reason=None, usage={"input_tokens": PROMPT, "output_tokens": 1})
        yield sse({"type": "message_start", "message": start}, "message_start")
        yield sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start")
        yield sse({"type": "ping"}, "ping")
        for i in range(n):
            yield sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x "}}, "content_block_delta")
            if slow:
                await asyncio.sleep(0.05)
        yield sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        yield sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                   "usage": {"output_tokens": n}}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")
        count("messages", PROMPT + n, request)
        served["completed_streams"] += 1

    return StreamingResponse(events(), media_type="text/event-stream")


if __name__ == "__main__":
    # The tests wait for this line, then for the port.
    print("ready", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
