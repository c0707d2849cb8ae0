"""Performance models: derived functions, JSON round trip, clear errors (Shukla & Simmhan Sec. 5-6)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.errors import ModelError
from sluice.models.performance import (
    ModelPoint,
    PerformanceModel,
    library_names,
    load_model,
    read_model,
)


def model(*points, name="m"):
    return PerformanceModel(name, tuple(ModelPoint(*p) for p in points))


def test_library_has_the_papers_five_tasks():
    assert set(library_names()) >= {"parse_xml", "pi", "batch_file_write", "blob", "table"}


def test_blob_single_thread_values_are_the_papers():
    blob = load_model("blob")
    assert blob.single_thread_rate == 2
    assert blob.single_thread_cpu == pytest.approx(0.0674)
    assert blob.single_thread_memory == pytest.approx(0.2392)
    # Sec. 5.3: 30 t/s with 50 threads is the best bundle
    assert (blob.peak_rate, blob.peak_threads) == (30, 50)


def test_table_peak_is_40_at_60_threads():
    # Sec. 5.3 says 60 t/s with 60 threads; the SAM example of Sec. 8.4.1 (full slot of 60
    # threads supports 40 t/s) and MBA's 160 / 420 threads need 40: we chose 40.
    table = load_model("table")
    assert (table.peak_rate, table.peak_threads) == (40, 60)
    # Sec. 8.5.1: 3 threads are not measured and interpolate to 6 t/s; Sec. 8.4.1: 2 -> 5, 9 -> 10
    assert table.rate(3) == pytest.approx(6)
    assert table.rate(2) == 5 and table.rate(9) == 10


def test_interpolation_is_linear_between_measured_points():
    m = model((1, 10, 0.1, 0.1), (5, 30, 0.5, 0.3))
    assert m.rate(3) == pytest.approx(20)
    assert m.cpu(2) == pytest.approx(0.2)
    assert m.memory(4) == pytest.approx(0.25)


def test_inverse_gives_smallest_thread_count():
    blob = load_model("blob")
    assert blob.threads_for(10) == 20  # I(19) = 9.6 < 10 <= I(20)
    assert blob.threads_for(20) == 30
    assert blob.threads_for(2) == 1
    assert blob.threads_for(0) == 1


def test_bell_curve_inverse_uses_rising_side():
    m = model((1, 5, 0.1, 0.1), (4, 20, 0.5, 0.5), (8, 10, 0.6, 0.6))
    assert m.threads_for(10) == 2  # 5 + 5 = 10 at q = 2, not the falling side at 8
    assert m.peak_threads == 4


def test_rate_above_peak_is_out_of_range():
    with pytest.raises(ModelError, match="above the peak"):
        load_model("pi").threads_for(111)


def test_thread_count_out_of_range_is_an_error_unless_held():
    pi = load_model("pi")
    with pytest.raises(ModelError, match="out of the measured range"):
        pi.rate(6)
    assert pi.rate(50, beyond=True) == pi.rate(5)
    with pytest.raises(ModelError, match="below 1"):
        pi.cpu(0)


@pytest.mark.parametrize(
    "points, message",
    [
        ((), "no measured points"),
        (((2, 5, 0.1, 0.1),), "1-thread point is missing"),
        (((1, 5, 0.1, 0.1), (3, 6, 0.1, 0.1), (2, 7, 0.1, 0.1)), "strictly increasing"),
        (((1, 5, 0.1, 0.1), (1, 6, 0.1, 0.1)), "strictly increasing"),
        (((1, 0, 0.1, 0.1),), "must be > 0"),
        (((1, 5, 1.5, 0.1),), "cpu at 1 threads"),
        (((1, 5, 0.1, -0.1),), "memory at 1 threads"),
    ],
)
def test_malformed_models_are_rejected(points, message):
    with pytest.raises(ModelError, match=message):
        model(*points)


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="no performance model named 'nope'"):
        load_model("nope")
    with pytest.raises(ModelError, match="does not exist"):
        read_model(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "points": [{"threads": 1}]}))
    with pytest.raises(ModelError, match="malformed"):
        read_model(bad)


def test_json_round_trip(tmp_path):
    for name in library_names():
        m = load_model(name)
        path = m.save(tmp_path / f"{name}.json")
        again = load_model(str(path))
        assert again == m
        assert PerformanceModel.from_dict(json.loads(json.dumps(m.to_dict()))) == m


@st.composite
def models(draw):
    n = draw(st.integers(1, 6))
    steps = draw(st.lists(st.integers(1, 20), min_size=n - 1, max_size=n - 1))
    threads = [1]
    for s in steps:
        threads.append(threads[-1] + s)
    rates = draw(st.lists(st.floats(0.5, 1000), min_size=n, max_size=n))
    fractions = st.floats(0, 1)
    return PerformanceModel(
        "h",
        tuple(ModelPoint(t, r, draw(fractions), draw(fractions)) for t, r in zip(threads, rates)),
    )


@settings(max_examples=60, deadline=None)
@given(models(), st.floats(0, 1))
def test_inverse_is_the_smallest_q_reaching_the_rate(m, fraction):
    omega = fraction * m.peak_rate
    q = m.threads_for(omega)
    assert m.rate(q) >= omega - 1e-6 * max(1, omega)
    assert q == 1 or m.rate(q - 1) < omega
    assert m.threads_for(m.rate(q)) <= q
