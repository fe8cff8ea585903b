"""A local HTTP server on 127.0.0.1 for download tests (generic mechanics only).

Routes: /files/<name> serves registered bytes (hits counts "METHOD path"), /truncated
promises more bytes than it sends, /slow never answers within the test's
timeout, anything else is 404.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hits: Counter[str] = Counter()
        self.delay = 0.0
        self.stop_slow = threading.Event()
        self.url = ""

    def add(self, name: str, content: bytes) -> str:
        self.files[name] = content
        return f"{self.url}/files/{name}"


def _handler(server: Server) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: bytes | None, length: int | None = None) -> None:
            self.send_response(200)
            self.send_header(
                "Content-Length", str(length if length is not None else len(body or b""))
            )
            self.end_headers()
            if body and self.command == "GET":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            server.hits[f"{self.command} {self.path}"] += 1
            if self.path.startswith("/files/") and self.path[7:] in server.files:
                time.sleep(server.delay)
                self._send(server.files[self.path[7:]])
            elif self.path == "/truncated":
                self._send(b"x" * 100, length=1000)
            elif self.path == "/slow":
                server.stop_slow.wait(30)
            else:
                self.send_error(404, "Not Found")

    return Handler


@contextmanager
def serve() -> Iterator[Server]:
    state = Server()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop_slow.set()
        httpd.shutdown()
        httpd.server_close()
