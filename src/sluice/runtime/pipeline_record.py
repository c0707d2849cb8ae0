"""The pipeline record of a checkpoint: which stateful operators its state belongs to, and
what that state depends on (``<checkpoint>/pipeline.json``).

A restart compares the pipeline with the record before anything runs (Flink's operator
uids and Spark's state-schema check do the same). Compatible changes carry on: stateless
operators changed, added or removed (a filter, a map, a sink), a stateful operator added
(it starts empty). Anything that would make an operator read state it did not write (key,
aggregates, window, a stateful operator gone or moved behind another) stops the job with one
:class:`PipelineChangedError` naming each operator, what changed and the way out: drop that
operator's state (``reset_state=[...]``, ``sluice run --reset-state``) or a new checkpoint.

Alternates (``graph.alternates``) are not part of the record: which one runs is in the plan
log, a keyed operator's alternates share its state, and adding or removing an alternate is a
change of functions, which the record never holds; an alternate in force that is gone is
replaced by the operator's default from the next batch on, with a warning.

A checkpoint written before the record existed is read as written by this pipeline under
the ids Sluice gave then (``graph.identity.legacy_ids``); the record is written on its
first run.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import replace

from sluice.errors import PipelineChangedError, PlanError
from sluice.graph import JobGraph
from sluice.graph.identity import describe, differences, identity_of, legacy_ids, state_record, with_ids
from sluice.graph.operators import id_problem
from sluice.plan.physical import adapted_plan, initial_plan
from sluice.runtime.checkpoint import STATE, Checkpoint
from sluice.runtime.files import remove_dir
from sluice.runtime.planlog import PlanLog

RECORD = "pipeline.json"
FORMAT = 1


def open_checkpoint(
    graph: JobGraph,
    checkpoint: Checkpoint,
    plan_log: PlanLog,
    partitions: int,
    *,
    reset_state: Iterable[str] = (),
    fuse: bool = True,
    collocate: bool = True,
) -> JobGraph:
    """Check the validated ``graph`` against the checkpoint, drop the state of the operators
    named in ``reset_state``, record the pipeline, and fit the plan log to it.

    Returns the graph under the ids the checkpoint keeps its state by. Raises
    PipelineChangedError, having changed nothing, when the state does not fit.
    """
    stored = checkpoint.read_bytes(RECORD)
    latest = plan_log.latest()
    if stored is not None:
        record = _parse(checkpoint, stored)
        recorded = record["operators"]
        max_parallelism = record["max_parallelism"]
    elif latest is not None:  # written before pipeline records: the state is under the old ids
        recorded = dict.fromkeys(latest.keyed)
        max_parallelism = latest.max_parallelism
    else:  # a new checkpoint
        recorded, max_parallelism = {}, graph.max_parallelism
    if max_parallelism != graph.max_parallelism:
        raise PipelineChangedError(
            f"the checkpoint {checkpoint} has {max_parallelism} key groups (max_parallelism), the pipeline "
            f"asks for {graph.max_parallelism}: keys are hashed to key groups for the life of a checkpoint. "
            f"Nothing was run. Set max_parallelism={max_parallelism}, or run with a new checkpoint."
        )
    sources = {op.id: type(op.connector).__name__ for op in graph.sources()}
    read_before = record.get("sources") if stored is not None else None
    if read_before is not None and read_before != sources:
        raise PipelineChangedError(
            f"the pipeline's sources changed: the checkpoint {checkpoint} holds the offsets of "
            f"{_named(read_before)}, the pipeline reads {_named(sources)}. A checkpoint cannot add, remove, "
            f"rename or swap sources (Spark's offset log keeps the offsets of the sources it started with). "
            f"Nothing was run. Run with a new checkpoint."
        )
    reset = list(dict.fromkeys(reset_state))
    _check_ids(checkpoint, [*reset, *recorded])
    graph = with_ids(graph, _checkpoint_ids(graph, recorded, legacy=stored is None))

    stateful = {op.id: op for op in graph.operators if op.is_keyed}
    unknown = [name for name in reset if name not in recorded and name not in stateful]
    if unknown:
        raise PipelineChangedError(
            f"reset_state names {unknown}, which hold no state here; stateful operators: "
            f"{sorted(set(recorded) | set(stateful))}. Nothing was run."
        )
    current = {op_id: state_record(graph, op) for op_id, op in stateful.items()}
    problems = []
    for op_id, old in recorded.items():
        if op_id in reset:
            continue
        if op_id not in current:
            problems.append((op_id, describe(old) if old else f"operator {op_id!r}", _missing(old, current, recorded)))
        elif old is not None:
            changed = differences(old, current[op_id])
            if changed:
                problems.append((op_id, describe(current[op_id]), changed))
    if problems:
        raise PipelineChangedError(_explain(checkpoint, problems))

    for op_id in reset:
        remove_dir(checkpoint.fs, checkpoint.path(STATE, op_id))
    checkpoint.write_bytes(
        RECORD,
        json.dumps(
            {
                "format": FORMAT,
                "pipeline": graph.name,
                "max_parallelism": graph.max_parallelism,
                "sources": sources,
                "operators": current,
            },
            indent=1,
        ).encode(),
    )
    if latest is None:
        plan_log.write(initial_plan(graph, partitions, fuse=fuse, collocate=collocate))
    else:
        done = checkpoint.done_batches()
        fit_plan_log(plan_log, graph, partitions, done[-1] + 1 if done else 0)
    return graph


def _parse(checkpoint: Checkpoint, stored: bytes) -> dict:
    """The pipeline record, or a PipelineChangedError naming the file when it is damaged
    (cut short by a full disk, edited by hand)."""
    try:
        record = json.loads(stored)
        if (
            isinstance(record, dict)
            and isinstance(record.get("operators"), dict)
            and isinstance(record.get("max_parallelism"), int)
        ):
            return record
        why = "it lacks its 'operators' or 'max_parallelism'"
    except (ValueError, UnicodeDecodeError) as e:
        why = f"it is not whole JSON ({e})"
    raise PipelineChangedError(
        f"{checkpoint.location(RECORD)} is damaged: {why}. Nothing was run. It records which "
        f"stateful operators the checkpoint holds; restore it from a backup, or run with a new checkpoint."
    )


def _check_ids(checkpoint: Checkpoint, ids: Iterable[str]) -> None:
    """Every operator id that may become a path under ``state/`` is one path component: a
    crafted ``pipeline.json`` or ``--reset-state ../x`` must not reach outside the checkpoint."""
    for op_id in ids:
        problem = id_problem(op_id)
        if problem:
            raise PipelineChangedError(
                f"operator id {op_id!r} (from reset_state or {checkpoint.location(RECORD)}) {problem}. "
                f"Nothing was run. If {RECORD} was edited or damaged, restore it or run with a new checkpoint."
            )


def _named(sources: dict[str, str]) -> str:
    return ", ".join(f"{kind} {op_id!r}" for op_id, kind in sources.items())


def _checkpoint_ids(graph: JobGraph, recorded: dict, legacy: bool) -> dict[str, str]:
    """Pipeline id -> the id the checkpoint keeps the operator's state under, where they differ."""
    if legacy:
        return {op_id: old for op_id, old in legacy_ids(graph).items() if old in recorded}
    by_identity = {entry["identity"]: op_id for op_id, entry in recorded.items()}
    return {
        op.id: by_identity[identity_of(op)]
        for op in graph.operators
        if op.is_keyed and by_identity.get(identity_of(op), op.id) != op.id
    }


def _missing(old: dict | None, current: dict[str, dict], recorded: dict) -> list[str]:
    """Why a recorded operator has no match in the pipeline: what changed, when exactly one
    new operator of its kind reads from the same upstream (its key changed, or its rank)."""
    if old is not None:
        alike = [
            new
            for op_id, new in current.items()
            if op_id not in recorded and new["kind"] == old["kind"] and new["upstream"] == old.get("upstream")
        ]
        if len(alike) == 1:
            return differences(old, alike[0]) or [
                f"it is now {alike[0]['name']!r}: another {old['kind']} by the same key on the same input was "
                f"added or removed before it (name= on an operator keeps its identity)"
            ]
    return [
        "it is not in this pipeline (removed, or a stateful operator before it was added, removed or "
        "changed; name= on an operator keeps its identity)"
    ]


def _explain(checkpoint: Checkpoint, problems: list[tuple[str, str, list[str]]]) -> str:
    lines = [
        f"the pipeline changed in a way the state in checkpoint {checkpoint} cannot follow "
        f"(nothing was run; the checkpoint is untouched):"
    ]
    for _, what, changes in problems:
        lines.append(f"  - {what}: {'; '.join(changes)}")
    ids = [op_id for op_id, _, _ in problems]
    flags = " ".join(f"--reset-state {op_id}" for op_id in ids)
    lines.append(
        f"Each keeps state built by the pipeline as it was. To drop that state and start "
        f"{'it' if len(ids) == 1 else 'them'} empty, keeping the rest of the checkpoint, run with "
        f"reset_state={ids!r} (sluice run {flags}); or run with a new checkpoint."
    )
    return "\n".join(lines)


def fit_plan_log(plan_log: PlanLog, graph: JobGraph, partitions: int, first: int) -> None:
    """Make every plan a batch from ``first`` on runs with fit ``graph`` (a changed pipeline):
    operators it no longer has are dropped, new ones planned afresh."""
    current = plan_log.plan_for(first)
    if current is None:
        raise PlanError(f"the plan log has no plan for batch {first}")
    later = [plan_log.read(v) for v in plan_log.versions() if v > first]
    for plan in [current, *later]:
        fitted = adapted_plan(plan, graph, partitions, max(plan.version, first))
        for op_id, alternate in plan.alternates.items():
            if op_id in fitted.alternates and fitted.alternates[op_id] != alternate:
                warnings.warn(
                    f"operator {op_id!r} no longer has the alternate {alternate!r} the checkpoint's plan "
                    f"runs from batch {fitted.version}: it runs its default {fitted.alternates[op_id]!r}",
                    stacklevel=3,
                )
        if fitted != replace(plan, version=fitted.version):
            plan_log.write(fitted)
