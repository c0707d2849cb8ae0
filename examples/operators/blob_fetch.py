"""Azure Blob Download (Sec. 5.2) on this machine: fetch a 2 MB object over HTTP and keep it in
memory, once per tuple.

:class:`BlobServer` is a threaded ``http.server`` on 127.0.0.1 with an ephemeral port, started
in-process by whoever runs the benchmark (the driver), serving one 2 MB object. It can add a
fixed service latency per request (default 10 ms) to stand in for a cloud object store's round
trip: with it the task is I/O bound and extra threads raise the rate until the CPU or the
server saturates, the bell curve of the paper's Fig. 3d; set ``latency_s=0`` for raw loopback.

:class:`BlobFetch` keeps one keep-alive HTTP connection per worker thread.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlparse

OBJECT_SIZE = 2 * 1024 * 1024


class BlobServer:
    """A local object store: GET /blob returns ``size`` bytes after ``latency_s`` seconds."""

    def __init__(self, size: int = OBJECT_SIZE, latency_s: float = 0.010):
        payload = os.urandom(size)
        latency = latency_s

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if latency > 0:
                    time.sleep(latency)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/blob"

    def start(self) -> BlobServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BlobFetch:
    name = "blob"

    def __init__(self, url: str):
        self.url = url
        parsed = urlparse(url)
        self._host, self._port, self._path = parsed.hostname, parsed.port, parsed.path or "/"
        self._local = threading.local()

    def setup(self) -> None:
        pass

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self._host, self._port, timeout=30)
        return conn

    def process(self, key: int) -> int:
        for attempt in (1, 2):  # one retry on a dropped keep-alive connection
            conn = self._connection()
            try:
                conn.request("GET", self._path)
                body = conn.getresponse().read()
                return len(body)
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        return 0

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
