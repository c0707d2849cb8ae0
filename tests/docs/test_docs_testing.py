"""The example of docs/testing.md runs as it stands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


@pytest.mark.spark
def test_the_testing_guide_example_runs(tmp_path):
    (example,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    namespace = {"checkpoint": str(tmp_path / "ckpt")}
    exec(compile(example, str(DOC), "exec"), namespace)  # its asserts are the test
    assert namespace["totals"].latest(keys="customer")[0]["total"] == 42
