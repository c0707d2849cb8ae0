"""A checkpoint's files name directories and may be damaged: operator ids are one path
component, and a damaged record is reported by name with the way out (no Spark)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import PipelineChangedError, PipelineError
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.pipeline_record import RECORD, open_checkpoint
from sluice.runtime.planlog import PlanLog


def pipeline(tmp_path, name: str = "counts") -> sluice.Pipeline:
    (tmp_path / "inbox").mkdir(exist_ok=True)
    p = sluice.Pipeline("safety")
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    (
        p.source(sources.directory(str(tmp_path / "inbox"), format="json", schema=schema), name="events")
        .key_by("k")
        .aggregate(n=agg.count(), name=name)
        .sink(sinks.memory("safety_out"))
    )
    return p


@pytest.mark.parametrize("name", ["..", ".", "../outside", "a/b", "a\\b", "x\n"])
def test_an_operator_name_that_would_leave_its_directory_is_refused_at_definition(tmp_path, name):
    with pytest.raises(PipelineError, match="operator name"):
        pipeline(tmp_path, name)


def _open(tmp_path, checkpoint: Checkpoint, reset=()):
    p = pipeline(tmp_path)
    p.graph.validate()
    return open_checkpoint(p.graph, checkpoint, PlanLog(checkpoint), 2, reset_state=reset)


def test_reset_state_cannot_delete_outside_the_checkpoint(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    checkpoint = Checkpoint(str(tmp_path / "ckpt"))
    _open(tmp_path, checkpoint)
    # a crafted record names an operator whose state directory would be the victim
    record = json.loads(checkpoint.read_bytes(RECORD))
    record["operators"]["../../victim"] = None
    checkpoint.write_bytes(RECORD, json.dumps(record).encode())
    for reset in (["../../victim"], ["counts"]):
        with pytest.raises(PipelineChangedError, match=r"operator id '\.\./\.\./victim'.*Nothing was run"):
            _open(tmp_path, checkpoint, reset)
    assert (victim / "precious").read_text() == "keep me"


def test_reset_state_by_a_path_is_refused(tmp_path):
    checkpoint = Checkpoint(str(tmp_path / "ckpt"))
    _open(tmp_path, checkpoint)
    with pytest.raises(PipelineChangedError, match=r"operator id '\.\.'"):
        _open(tmp_path, checkpoint, [".."])
    assert (tmp_path / "ckpt" / RECORD).exists()


@pytest.mark.parametrize(
    "damage", [lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b"[1, 2]", lambda b: b"\xff\xfe garbage"]
)
def test_a_damaged_pipeline_record_is_named_with_the_way_out(tmp_path, damage):
    checkpoint = Checkpoint(str(tmp_path / "ckpt"))
    _open(tmp_path, checkpoint)
    path = tmp_path / "ckpt" / RECORD
    path.write_bytes(damage(path.read_bytes()) or b" ")
    with pytest.raises(PipelineChangedError) as error:
        _open(tmp_path, checkpoint)
    message = str(error.value)
    assert str(path) in message and "damaged" in message and "new checkpoint" in message
