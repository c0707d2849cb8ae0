"""docs/reference/ is generated from the public API's docstrings by scripts/gen_reference.py;
the committed pages must be what it writes now, so a changed docstring or signature comes
with its reference page."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_current():
    pages = load_generator().pages()
    committed = {p.name for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert committed == set(pages), f"docs/reference has {sorted(committed)}, the generator writes {sorted(pages)}"
    stale = [name for name, text in pages.items() if (ROOT / "docs" / "reference" / name).read_text() != text]
    assert not stale, f"docs/reference/{stale} is not current: run .venv/bin/python scripts/gen_reference.py"


def test_every_public_function_and_class_is_documented():
    """A public name without a docstring shows as '(no docstring)' on its page: none may."""
    pages = load_generator().pages()
    bare = [name for name, text in pages.items() if "*(no docstring)*" in text]
    assert not bare, f"public names without a docstring on {bare}"


def test_the_pages_cover_the_public_modules():
    pages = load_generator().pages()
    for page, names in {
        "pipeline.md": ["Pipeline.goals", "Stream.map_batches", "KeyedStream.aggregate", "WindowedStream"],
        "agg.md": ["count_distinct", "approx_percentile", "udaf"],
        "sources.md": ["generator", "directory", "kafka"],
        "sinks.md": ["files", "read_latest", "delta"],
        "windows.md": ["tumbling", "sliding", "session"],
        "state.md": ["read"],
        "testing.md": ["Source", "Sink", "run"],
    }.items():
        for name in names:
            assert f"`{name}" in pages[page], f"{name} missing from docs/reference/{page}"
