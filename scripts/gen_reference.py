"""Write the API reference, docs/reference/*.md, from the public API's docstrings.

    .venv/bin/python scripts/gen_reference.py           # rewrite docs/reference/
    .venv/bin/python scripts/gen_reference.py --check   # exit 1 if a page is not current

One page per public module; each lists the module's public names (its ``__all__``, or the
names given below) with their signatures and docstrings, classes with their public methods
and properties. Pure Python (``inspect``): nothing starts Spark. tests/docs/test_reference.py
fails when a committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "reference")


@dataclass(frozen=True)
class Page:
    file: str
    module: str
    title: str
    intro: str
    names: tuple[str, ...] | None = None  # None: the module's __all__


PAGES = (
    Page(
        "pipeline.md",
        "sluice",
        "Pipeline, Stream, KeyedStream",
        "Build a job: a `Pipeline` with its sources, `Stream` operators, keyed operators on a "
        "`KeyedStream`, windows, sinks, goals, and `run`.",
        ("Pipeline", "Stream", "KeyedStream", "sluice.api.windows.WindowedStream", "Alt", "report"),
    ),
    Page("agg.md", "sluice.agg", "sluice.agg: aggregates", "Aggregates for `KeyedStream.aggregate` and windows."),
    Page("sources.md", "sluice.sources", "sluice.sources: sources", "Where a pipeline's records come from."),
    Page("sinks.md", "sluice.sinks", "sluice.sinks: sinks", "Where a pipeline's records go, and reading file-sink output."),
    Page(
        "windows.md",
        "sluice.windows",
        "sluice.windows: windows",
        "Tumbling, sliding and session windows on event or processing time.",
    ),
    Page(
        "state.md",
        "sluice.state",
        "sluice.state: reading state",
        "Read a job's keyed state from its checkpoint, while it runs or after.",
    ),
    Page(
        "testing.md",
        "sluice.testing",
        "sluice.testing: testing pipelines",
        "Run a pipeline on batches you give it and check its output.",
    ),
    Page("errors.md", "sluice.errors", "sluice.errors: errors", "What Sluice raises; every error is a `SluiceError`."),
    Page(
        "control.md",
        "sluice.control",
        "sluice.control: policies (for experts)",
        "Named control policies and the objects a policy of your own implements and sees. With "
        "`pipeline.goals(...)` and no policies named, the autopilot runs and none of this is needed.",
    ),
)


def resolve(module, name: str):
    if "." in name:
        mod, _, attr = name.rpartition(".")
        return attr, getattr(importlib.import_module(mod), attr)
    return name, getattr(module, name)


def public_names(module, page: Page) -> list[str]:
    if page.names is not None:
        return list(page.names)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", "").startswith("sluice")
        ]
    return sorted(n for n in names if not n.startswith("_"))


def annotation(a) -> str:
    if a is inspect.Parameter.empty:
        return ""
    return a if isinstance(a, str) else inspect.formatannotation(a)


def default(value) -> str:
    # no memory addresses: the page must not change from one run to the next
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def signature(obj, drop_self: bool = False) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts, star_done = [], False
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star_done = "*" + text, True
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + text
        if (a := annotation(p.annotation)) != "":
            text += f": {a}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {default(p.default)}" if a else f"={default(p.default)}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (p is params[-1] or params[params.index(p) + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    out = "(" + ", ".join(parts) + ")"
    if (r := annotation(sig.return_annotation)) != "":
        out += f" -> {r}"
    return out


def markdown(doc: str | None) -> str:
    """A docstring as Markdown: ``x`` as `x`, doctest and indented examples as code blocks."""
    if not doc:
        return "*(no docstring)*"
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out += ["```python", *block, "```"]
            continue
        if line.startswith("    ") and (not out or not out[-1].strip()):
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["```", *block, "```", ""]
            continue
        line = re.sub(r"``([^`]+)``", r"`\1`", line)
        out.append(re.sub(r":(?:mod|class|func|meth|attr):`~?([^`]+)`", r"`\1`", line))
        i += 1
    return "\n".join(out).strip()


def members(cls) -> list[tuple[str, object]]:
    """A class's own public methods and properties, in source order."""
    found = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        member = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        # an undocumented method is an implementation detail the runtime calls, not the user
        if (inspect.isfunction(member) or isinstance(member, property)) and member.__doc__:
            found.append((name, member))
    return found


def class_doc(cls) -> str | None:
    """The class's docstring; None for the signature a dataclass without one gets as its doc."""
    doc = cls.__doc__
    if doc and dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def render_class(name: str, cls) -> list[str]:
    out = [f'<a id="{name.lower()}"></a>', "", f"## `{name}{signature(cls)}`", "", markdown(class_doc(cls)), ""]
    for member, value in members(cls):
        if isinstance(value, property):
            out += [f"### `{name}.{member}` (property)", "", markdown(value.__doc__), ""]
        else:
            out += [f"### `{name}.{member}{signature(value, drop_self=True)}`", "", markdown(value.__doc__), ""]
    return out


def render(page: Page) -> str:
    module = importlib.import_module(page.module)
    out = [
        f"# {page.title}",
        "",
        "<!-- generated by scripts/gen_reference.py from the docstrings: edit those, then run it -->",
        "",
        page.intro,
        "",
    ]
    names = public_names(module, page)
    entries = [resolve(module, n) for n in names]
    out += ["Contents: " + ", ".join(f"[`{n}`](#{n.lower()})" for n, v in entries if documentable(v)), ""]
    for name, value in entries:
        if inspect.isclass(value):
            out += render_class(name, value)
        elif callable(value):
            out += [f'<a id="{name.lower()}"></a>', "", f"## `{name}{signature(value)}`", "", markdown(value.__doc__), ""]
        elif inspect.ismodule(value):
            continue  # a submodule has its own page
    return "\n".join(out).rstrip() + "\n"


def documentable(value) -> bool:
    return inspect.isclass(value) or (callable(value) and not inspect.ismodule(value))


def index() -> str:
    lines = [
        "# API reference",
        "",
        "<!-- generated by scripts/gen_reference.py from the docstrings: edit those, then run it -->",
        "",
        "Generated from the docstrings of the public API. The guides in [docs/](../) say how the",
        "pieces fit together; these pages say what each takes and returns.",
        "",
    ]
    lines += [f"- [{p.title}]({p.file}): {p.intro}" for p in PAGES]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    out = {"README.md": index()}
    for page in PAGES:
        out[page.file] = render(page)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Write docs/reference/ from the docstrings.")
    ap.add_argument("--check", action="store_true", help="only check that the committed pages are current")
    args = ap.parse_args()
    stale = []
    for file, text in pages().items():
        path = os.path.join(OUT, file)
        current = None
        if os.path.exists(path):
            with open(path) as f:
                current = f.read()
        if current == text:
            continue
        stale.append(file)
        if not args.check:
            os.makedirs(OUT, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    if args.check and stale:
        print(f"docs/reference is not current ({', '.join(stale)}): run scripts/gen_reference.py", file=sys.stderr)
        return 1
    print(f"{'checked' if args.check else 'wrote'} docs/reference ({len(stale)} page(s) changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
