"""Every public function of the user API (sluice.api, sluice.sources, sluice.sinks,
sluice.windows, sluice.agg) has a docstring with a short example, and the examples run."""

import doctest
import importlib
import inspect

import pytest

PUBLIC = ["sluice.sources", "sluice.sinks", "sluice.windows", "sluice.agg"]


def _public_callables():
    import sluice.api

    found = []
    for name in PUBLIC:
        module = importlib.import_module(name)
        found += [(f"{name}.{n}", getattr(module, n)) for n in module.__all__]
    for cls in (sluice.api.Pipeline, sluice.api.Stream, sluice.api.KeyedStream):
        found += [
            (f"sluice.{cls.__name__}.{n}", f) for n, f in vars(cls).items() if not n.startswith("_") and inspect.isfunction(f)
        ]
    return [(n, f) for n, f in found if inspect.isfunction(f) or inspect.isclass(f)]


@pytest.mark.parametrize("name,obj", _public_callables(), ids=lambda x: x if isinstance(x, str) else "")
def test_public_api_has_a_docstring_with_an_example_that_runs(name, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{name} has no docstring"
    if inspect.isclass(obj) and ">>>" not in doc:
        pytest.skip("a spec class: its factory function carries the example")
    assert ">>>" in doc, f"{name}: its docstring has no example"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(obj, name, globs={}):
        runner.run(test)
    assert runner.failures == 0, f"{name}: its example failed (see the output above)"
