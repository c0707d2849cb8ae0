"""The dashboard's HTTP server: the page, its JSON feed and Prometheus' ``/metrics``.

Python's own threaded HTTP server is enough for a page polled once a second by a few people
and scraped by Prometheus: no web framework to install. Routes:

    /                 the dashboard (static HTML, CSS and JavaScript; charts drawn in the
                      browser, nothing loaded from the internet)
    /api/state        JSON: the batches after ``?since=<batch id>``, decisions, constraints,
                      plan, totals (see JobView.state)
    /metrics          Prometheus text exposition (see prometheus.JobCollector)
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlparse

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sluice.ui.job_view import JobView
from sluice.ui.prometheus import registry_for

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


class DashboardServer:
    """Serves one job's checkpoint on ``host:port`` (port 0 picks a free one) in a thread."""

    def __init__(
        self,
        checkpoint: str,
        host: str = "127.0.0.1",
        port: int = 8321,
        job: str | None = None,
        constraints: list[dict] | None = None,
    ):
        self.view = JobView(checkpoint, declared=list(constraints or []))
        self.job = job or default_job_name(checkpoint)
        self.registry = registry_for(self.view, self.job)
        self.lock = threading.Lock()  # one JobView, read by concurrent requests
        self.allowed_hosts = allowed_hosts(host)
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}/"

    def start(self) -> DashboardServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="sluice-dashboard", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def state(self, since: int) -> dict:
        with self.lock:
            out = self.view.state(since)
        out["job"] = self.job
        return out

    def metrics(self) -> bytes:
        with self.lock:
            return generate_latest(self.registry)


def default_job_name(checkpoint: str) -> str:
    """The pipeline's name as the checkpoint records it (``pipeline.json``): the same job
    label under ``sluice run --ui`` and ``sluice ui``, whatever the folder is called. A
    checkpoint without the record (no batch ran yet) is named by its directory, or its
    parent's when it is merely called ``checkpoint``."""
    from sluice.ui.job_view import recorded_pipeline_name

    recorded = recorded_pipeline_name(checkpoint)
    if recorded:
        return recorded
    parts = os.path.normpath(checkpoint.split("://", 1)[-1]).split(os.sep)
    return parts[-2] if parts[-1] in ("checkpoint", "checkpoints", "ckpt") and len(parts) > 1 else parts[-1]


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def allowed_hosts(bind: str) -> frozenset[str]:
    """The names a request's ``Host`` header may carry: the loopback names, and the address
    the server binds when it is a particular one. A page of another site whose name an
    attacker points at 127.0.0.1 (DNS rebinding) sends its own name and is refused, so it
    cannot read ``/api/state`` from a browser on this machine."""
    return LOOPBACK_NAMES | ({bind.lower()} if bind not in WILDCARDS else frozenset())


def host_name(header: str | None) -> str | None:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowered."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[1:end] if end > 0 else None
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _handler(server: DashboardServer):
    static = resources.files("sluice.ui") / "static"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if host_name(self.headers.get("Host")) not in server.allowed_hosts:
                return self._send(421, b"unexpected Host header: open the dashboard by the address it serves", "text/plain")
            url = urlparse(self.path)
            if url.path == "/api/state":
                since = parse_qs(url.query).get("since", ["-1"])[0]
                try:
                    since_id = int(since)
                except ValueError:
                    return self._send(400, b"since must be a batch id", "text/plain")
                body = json.dumps(server.state(since_id), default=str).encode()
                return self._send(200, body, "application/json")
            if url.path == "/metrics":
                return self._send(200, server.metrics(), CONTENT_TYPE_LATEST)
            name = "index.html" if url.path in ("/", "/index.html") else url.path.removeprefix("/static/")
            ext = os.path.splitext(name)[1]
            if "/" in name or ext not in STATIC_TYPES or not (static / name).is_file():
                return self._send(404, b"not found", "text/plain")
            return self._send(200, (static / name).read_bytes(), STATIC_TYPES[ext])

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            pass

    return Handler


def serve(
    checkpoint: str, host: str = "127.0.0.1", port: int = 8321, job: str | None = None, constraints: list[dict] | None = None
) -> DashboardServer:
    """Start serving ``checkpoint``'s dashboard in a background thread; returns the server.

    ``constraints``: the job's latency constraints as dicts (``LatencyConstraint.to_dict()``),
    so their bounds show before the controller's first decision reports them."""
    return DashboardServer(checkpoint, host, port, job, constraints).start()
