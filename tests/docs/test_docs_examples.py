"""The Python examples of README.md and docs/: every block is valid Python, and the
self-contained ones (their own imports, a whole pipeline) execute as written, each pipeline
checked as `sluice check` checks it: `Pipeline.run` is replaced by the full validation, so
no Spark starts. The examples run end to end on Spark have tests of their own (the
walkthrough, testing.md, cluster.md's spark-submit job)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

import sluice

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

# input a block reads from a folder of the user's (its schema is inferred from the files)
INPUT = {"inbox/0001.json": '{"ts": "2026-01-01T00:00:05Z", "shop": "a", "amount": 3.5}\n'}

# (page, the block's first line): blocks that stand alone and must run as written
SELF_CONTAINED = [
    ("README.md", "import sluice"),  # the ten lines
    ("README.md", "import pyarrow as pa"),  # Kafka to Delta
    ("connectors.md", "import pyarrow as pa"),
    ("event-time.md", "import sluice"),  # reads orders from a folder: one file of them here
    ("state.md", None),
    ("planning.md", None),
    ("operations.md", "from sluice.runtime.side_outputs import read_side_output"),
]


def blocks(page: Path) -> list[str]:
    return [m.group(1) for m in BLOCK.finditer(page.read_text())]


def first_line(code: str) -> str:
    return next(line for line in code.splitlines() if line.strip() and not line.startswith("#"))


def standalone() -> list[tuple[str, int, str]]:
    out = []
    for page, first in SELF_CONTAINED:
        for i, code in enumerate(blocks(ROOT / ("README.md" if page == "README.md" else f"docs/{page}"))):
            line = first_line(code)
            if line.startswith(("import ", "from ")) and (first is None or line == first):
                out.append((page, i, code))
    return out


class Ran(Exception):
    """What the example's `run` raises here, once its pipeline validated."""


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_python_block_compiles(page):
    for i, code in enumerate(blocks(page)):
        compile(code, f"{page.name} python block {i}", "exec")


@pytest.mark.parametrize(("page", "index", "code"), standalone(), ids=lambda v: str(v)[:30] if isinstance(v, str) else v)
def test_a_self_contained_example_runs_as_written(page, index, code, tmp_path, monkeypatch):
    def validate_instead(self, checkpoint, **options):
        self.job_graph().validate()
        raise Ran

    monkeypatch.setattr(sluice.Pipeline, "run", validate_instead)
    monkeypatch.chdir(tmp_path)
    for name, text in INPUT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Ran):
        exec(compile(code, f"{page} python block {index}", "exec"), {"__name__": "__doc_example__"})


def test_the_list_of_standalone_examples_is_not_empty():
    found = {(page, first_line(code)) for page, _, code in standalone()}
    for page, first in SELF_CONTAINED:
        assert any(p == page and (first is None or line == first) for p, line in found), (page, first)
