"""Calls opbound's gRPC services with Python's grpcio for tests/grpc.rs: an independent client.

Reads a JSON list on stdin, each call {"target": "HOST:PORT", "method": "/package.Service/Method",
"request": "FILE"} whose file holds the encoded request message, and prints one JSON line per
call: {"code": "OK" or the error's status name, "details", "response": the answer's bytes in
hex}. The messages are sent as bytes, so no generated code is needed. A missing grpcio is a
failure, never a skip: install it with pip (.ci/test does).
"""

import json
import sys

try:
    import grpc
except ImportError:
    print("python's grpcio is not installed: run `python3 -m pip install grpcio` (.ci/test does)")
    sys.exit(1)

OPTIONS = [
    # Loopback only, whatever the environment says about proxies.
    ("grpc.enable_http_proxy", 0),
    # Room to receive an answer of any size, so its size is what the test sees.
    ("grpc.max_receive_message_length", 64 << 20),
]

for call in json.load(sys.stdin):
    with open(call["request"], "rb") as f:
        request = f.read()
    with grpc.insecure_channel(call["target"], options=OPTIONS) as channel:
        unary = channel.unary_unary(call["method"], request_serializer=None, response_deserializer=None)
        try:
            response = unary(request, timeout=60)
            line = {"code": "OK", "details": "", "response": response.hex()}
        except grpc.RpcError as e:
            line = {"code": e.code().name, "details": e.details() or "", "response": ""}
    print(json.dumps(line), flush=True)
