"""What a Sluice job exposes on the network: local Spark listens on loopback only, and the
dashboard answers only requests addressed to it by a loopback name (no DNS rebinding)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys

import pytest

from sluice.runtime.session import is_local_master, network_conf
from sluice.ui import serve


def _get(url: str, path: str, host: str | None = None) -> tuple[int, bytes]:
    address = url.removeprefix("http://").rstrip("/")
    conn = http.client.HTTPConnection(address, timeout=10)
    conn.putrequest("GET", path, skip_host=host is not None)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    response = conn.getresponse()
    return response.status, response.read()


def test_dashboard_refuses_a_foreign_host_header(tmp_path):
    server = serve(str(tmp_path / "checkpoint"), port=0)
    try:
        port = server.url.rstrip("/").rsplit(":", 1)[1]
        for host in (None, f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
            status, body = _get(server.url, "/api/state", host)
            assert status == 200, (host, body)
            assert "batches" in json.loads(body)
        for host in (f"attacker.example:{port}", "attacker.example", "10.1.2.3", ""):
            for path in ("/api/state", "/metrics", "/"):
                status, body = _get(server.url, path, host)
                assert status == 421, (host, path, status)
                assert b"batches" not in body
    finally:
        server.stop()


def test_a_local_master_binds_loopback_and_a_remote_one_is_left_alone():
    for master in ("local", "local[2]", "local[*]", "spark://127.0.0.1:7077", "spark://localhost:7077"):
        assert is_local_master(master)
        conf = network_conf(master)
        assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
        assert conf["spark.ui.killEnabled"] == "false"
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://api:6443"):
        assert not is_local_master(master)
        assert "spark.driver.host" not in network_conf(master)
        assert network_conf(master)["spark.ui.killEnabled"] == "false"


_LISTENERS = r"""
import json, subprocess, sys
import pyarrow as pa
from sluice import sources
from sluice.runtime.session import jvm_pid, spark_session
from sluice.runtime.sources.datasource import encode_spec, open_stream
spark = spark_session(master="local[1]", ui=True)
pid = jvm_pid(spark)
out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
local = [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]
spec = sources.redis("k", pa.schema([("v", pa.string())]), url="redis://:hunter2@127.0.0.1:1/0")
frame = open_stream(spark, spec, "controls", "src")
plan = frame._jdf.queryExecution().toString()
print(json.dumps({"ui": spark.sparkContext.uiWebUrl, "listening": local,
                  "spec_in_plan": encode_spec(spec)[:40] in plan, "plan_has_source": "sluice" in plan}))
"""


@pytest.mark.spark
def test_local_spark_listens_on_loopback_only(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env["SLUICE_SPARK_UI"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _LISTENERS], check=False, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ui"].startswith("http://127.0.0.1:"), report
    assert report["plan_has_source"] and not report["spec_in_plan"], report  # the encoded spec is redacted
    assert report["listening"], report  # the UI, the driver's RPC and its block manager
    for address in report["listening"]:
        host = address.rsplit(":", 1)[0].strip("[]")
        assert host in ("127.0.0.1", "::ffff:127.0.0.1"), report
