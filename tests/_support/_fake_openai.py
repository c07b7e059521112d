"""A loopback OpenAI-compatible chat server for tests: ``POST /v1/chat/completions``
answered by a script, on 127.0.0.1 only.

The script is a function of the request body (``{"model", "messages", ...}``) that returns
the answer's text or a :class:`Reply`: an HTTP error with headers (429 + ``Retry-After``,
500), a dropped connection, a delay, or a body that is not a chat completion (:func:`raw`:
a proxy's HTML page, a truncated JSON body). Every request is recorded (body and headers), and
so is the largest number of requests in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    message: str = ""
    drop: bool = False
    delay: float = 0.0
    body: bytes | None = None
    content_type: str = "application/json"


def answer(content: str, delay: float = 0.0) -> Reply:
    return Reply(content=content, delay=delay)


def error(status: int, message: str = "scripted error", headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, message=message, headers=headers or {})


def raw(body: str | bytes, status: int = 200, content_type: str = "application/json") -> Reply:
    """Answer with ``body`` as it is (not a chat completion), e.g. ``raw("<html>...")``."""
    return Reply(status=status, body=body.encode() if isinstance(body, str) else body, content_type=content_type)


def drop() -> Reply:
    """Close the connection without answering (a crashed or overloaded proxy)."""
    return Reply(drop=True)


Script = Callable[[dict[str, Any]], "Reply | str"]


def in_order(*replies: Reply | str) -> Script:
    """A script answering with ``replies`` one after the other; the last one repeats."""
    queue = list(replies)

    def script(body: dict[str, Any]) -> Reply | str:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: connections waiting to be accepted (socketserver's 5 makes clients that connect
    #: together wait for a SYN retransmission, a second)
    request_queue_size = 256


class FakeOpenAI:
    """``with FakeOpenAI(script) as server: ... server.url ...`` (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _respond(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append({"body": body, "headers": headers})
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            reply = self.script(body)
        return reply if isinstance(reply, Reply) else answer(reply)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # as the servers it stands for (vLLM's, OpenAI's): connections kept alive, each
            # answer sent at once (headers and body in two writes would wait on Nagle's algorithm)
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = fake._respond(json.loads(raw), {k.lower(): v for k, v in self.headers.items()})
                try:
                    if reply.delay:
                        time.sleep(reply.delay)
                    if reply.drop:
                        self.close_connection = True
                        return
                    if reply.body is not None:
                        self._send(reply.status, reply.body, reply.headers, reply.content_type)
                        return
                    if reply.status != 200:
                        self._send(reply.status, {"error": {"message": reply.message, "type": "scripted"}},
                                   reply.headers)
                        return
                    body = json.loads(raw)
                    self._send(200, {
                        "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion", "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }, reply.headers)
                finally:
                    fake._done()

            def _send(self, status: int, payload: dict | bytes, headers: dict[str, str] | None = None,
                      content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
