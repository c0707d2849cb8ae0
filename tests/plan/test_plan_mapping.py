"""Mapping: DSM, RSM, SAM, acquisition, add-a-slot retry, prediction (Shukla & Simmhan Sec. 7, 8.5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.errors import PlanError
from sluice.models.performance import ModelPoint, PerformanceModel
from sluice.plan.allocation import Dag, Task, allocate_lsa, allocate_mba, paper_micro_dag
from sluice.plan.mapping import (
    Cluster,
    acquire_vms,
    map_dsm,
    map_rsm,
    map_sam,
    plan_mapping,
    slot_name,
)
from sluice.plan.predict import predict


def pm(name, *points):
    return PerformanceModel(name, tuple(ModelPoint(*p) for p in points))


# Fig. 4's DAG B -> O -> Y -> G, with models built so that MBA at 30 t/s gives 5, 4, 3, 5 threads
# in full bundles of 2, 3, 3, 4 threads.
FIG4_MODELS = {
    "B": pm("B", (1, 8, 0.2, 0.2), (2, 12, 0.9, 0.9), (3, 11, 0.95, 0.95)),
    "O": pm("O", (1, 10, 0.3, 0.2), (2, 15, 0.6, 0.5), (3, 20, 0.9, 0.8), (4, 18, 0.9, 0.9)),
    "Y": pm("Y", (1, 12, 0.3, 0.2), (2, 22, 0.6, 0.4), (3, 30, 0.9, 0.7)),
    "G": pm("G", (1, 8, 0.3, 0.5), (2, 14, 0.5, 0.6), (3, 20, 0.7, 0.7), (4, 25, 0.9, 0.9), (5, 24, 0.9, 0.9)),
}
FIG4_DAG = Dag(tuple(Task(t, FIG4_MODELS[t]) for t in "BOYG"), (("B", "O"), ("O", "Y"), ("Y", "G")))
THREE_VMS_OF_TWO = Cluster((2, 2, 2))


@pytest.fixture
def fig4_allocation():
    alloc = allocate_mba(FIG4_DAG, 30, FIG4_MODELS)
    assert [alloc.tasks[t].threads for t in "BOYG"] == [5, 4, 3, 5]
    assert [alloc.tasks[t].bundle for t in "BOYG"] == [2, 3, 3, 4]
    assert alloc.slots == 6
    return alloc


def by_slot(mapping):
    """{slot name: [thread names in mapping order]}, e.g. {'s1.1': ['B1', 'O2', 'G1']}."""
    out = {}
    for (task, k), slot in mapping.assignment.items():
        out.setdefault(slot_name(slot), []).append(f"{task}{k}")
    return out


def test_dsm_matches_fig4(fig4_allocation):
    got = by_slot(map_dsm(FIG4_DAG, fig4_allocation, THREE_VMS_OF_TWO))
    assert got == {
        "s1.1": ["B1", "O2", "G1"],
        "s1.2": ["B2", "O3", "G2"],
        "s2.1": ["B3", "O4", "G3"],
        "s2.2": ["B4", "Y1", "G4"],
        "s3.1": ["B5", "Y2", "G5"],
        "s3.2": ["O1", "Y3"],
    }


def test_sam_matches_fig4(fig4_allocation):
    got = by_slot(map_sam(FIG4_DAG, fig4_allocation, THREE_VMS_OF_TWO, FIG4_MODELS))
    assert got == {
        "s1.1": ["B1", "B2"],
        "s1.2": ["O1", "O2", "O3"],
        "s2.1": ["Y1", "Y2", "Y3"],
        "s2.2": ["G1", "G2", "G3", "G4"],
        "s3.1": ["B3", "B4"],
        "s3.2": ["O4", "G5", "B5"],
    }


def test_rsm_maps_first_sweep_onto_the_reference_vm(fig4_allocation):
    mapping = map_rsm(FIG4_DAG, fig4_allocation, THREE_VMS_OF_TWO, FIG4_MODELS)
    # Fig. 4's first sweep: B1, O1, Y1 share s1.1; G1 (50 % memory) does not fit what is left
    # of s1.1's memory and goes to s1.2, on the same VM, the nearest by R-Storm's distance
    got = by_slot(mapping)
    assert got["s1.1"][:3] == ["B1", "O1", "Y1"]
    assert got["s1.2"][0] == "G1"
    assert len(mapping.assignment) == 17


def test_rsm_respects_vm_cpu_and_slot_memory():
    dag = paper_micro_dag("linear")
    alloc = allocate_lsa(dag, 100)
    result = plan_mapping(dag, alloc, "RSM")
    models = dag.models()
    mem, cpu = {}, {}
    for (task, _), slot in result.mapping.assignment.items():
        a = alloc.tasks[task]
        c, m = (models[task].single_thread_cpu, models[task].single_thread_memory) if task in models else (a.cpu, a.memory)
        mem[slot] = mem.get(slot, 0) + m
        cpu[slot[0]] = cpu.get(slot[0], 0) + c
    assert max(mem.values()) <= 1 + 1e-9
    for vm, used in cpu.items():
        assert used <= result.cluster.vm_slots[vm] + 1e-9


def test_sam_full_bundles_get_exclusive_slots():
    dag = paper_micro_dag("linear")
    result = plan_mapping(dag, allocate_mba(dag, 280), "SAM")
    blob_slots = result.mapping.slots_of("B")
    assert sorted(blob_slots.values()) == [20] + [50] * 9  # 9 full bundles and the partial (Sec. 8.5.1)
    per_slot = result.mapping.threads_per_slot()
    for slot, count in blob_slots.items():
        if count == 50:
            assert per_slot[slot] == {"B": 50}


def test_acquisition_largest_class_first():
    assert acquire_vms(6, (2,)).vm_slots == (2, 2, 2)
    assert acquire_vms(13).vm_slots == (4, 4, 4, 1)
    assert acquire_vms(7).vm_slots == (4, 4)  # smallest class covering the remaining 3
    assert acquire_vms(2).vm_slots == (2,)
    with pytest.raises(PlanError):
        acquire_vms(0)


def test_add_a_slot_retry_when_the_mapper_runs_out():
    # two tasks each needing 60 % of a slot's memory per thread cannot share a slot: rho = 2 fails
    big = pm("big", (1, 10, 0.1, 0.6))
    dag = Dag((Task("a", big), Task("b", big), Task("c", big)), (("a", "b"), ("b", "c")))
    alloc = allocate_lsa(dag, 10, dict.fromkeys("abc", big))
    assert alloc.slots == 2
    result = plan_mapping(dag, alloc, "RSM", dict.fromkeys("abc", big), vm_classes=(1,))
    assert result.slots == 3 and result.extra_slots == 1
    with pytest.raises(PlanError, match="insufficient resources"):
        map_rsm(dag, alloc, Cluster((1, 1)), dict.fromkeys("abc", big))


def test_prediction_of_sam_with_capacity_routing_meets_the_plan():
    dag = paper_micro_dag("diamond")
    result = plan_mapping(dag, allocate_mba(dag, 100), "SAM")
    p = predict(dag, result.mapping, routing="capacity")
    assert p.rate == pytest.approx(100, rel=1e-6)
    # Storm-like even routing: the partial Table slot (40 threads, 20 t/s) gets 40/160 of 100 = 25 t/s
    even = predict(dag, result.mapping, routing="even")
    assert even.rate == pytest.approx(80)
    assert even.bottleneck == "T"


def test_prediction_resources_scale_with_load():
    dag = Dag((Task("t", "pi"),))
    mapping = map_dsm(dag, allocate_mba(dag, 105), Cluster((1,)))
    p = predict(dag, mapping, at_rate=52.5)
    assert p.rate == pytest.approx(105)
    assert p.vm_cpu["vm1"] == pytest.approx(0.45)  # 90 % x 52.5 / 105
    assert p.slot_memory["s1.1"] == pytest.approx(0.01)


def test_pipelined_prediction_is_cpu_limited_when_slots_are_oversubscribed():
    dag = Dag((Task("x", "parse_xml"), Task("p", "pi")), (("x", "p"),))
    mapping = map_dsm(dag, allocate_mba(dag, 100), Cluster((1,)))  # both on one core
    p = predict(dag, mapping, cpu_scope="slot")
    # alone each allows >= 105 t/s, together they need 85/310 + 90/105 of the core per t/s
    assert p.rate == pytest.approx(1 / (0.85 / 310 + 0.90 / 105))
    assert p.bottleneck.startswith("CPU")
    staged = predict(dag, mapping, execution="staged")
    assert staged.rate == pytest.approx(1 / (1 / 310 + 1 / 105))


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["linear", "diamond", "star"]),
    st.floats(5, 300),
    st.sampled_from(["DSM", "RSM", "SAM"]),
    st.sampled_from(["LSA", "MBA"]),
)
def test_every_thread_is_mapped_once(shape, rate, mapper, allocator):
    dag = paper_micro_dag(shape)
    alloc = (allocate_lsa if allocator == "LSA" else allocate_mba)(dag, rate)
    if allocator == "LSA" and mapper == "SAM":
        # LSA's linear resources can make a partial bundle bigger than a slot: a clear error
        try:
            plan_mapping(dag, alloc, mapper)
        except PlanError as exc:
            assert "needs more than one slot" in str(exc)
            return
    result = plan_mapping(dag, alloc, mapper)
    counts = {}
    for task, _ in result.mapping.assignment:
        counts[task] = counts.get(task, 0) + 1
    assert counts == {t: a.threads for t, a in alloc.tasks.items()}
    assert result.slots >= alloc.slots
    assert all(s[0] < len(result.cluster.vm_slots) for s in result.mapping.assignment.values())
