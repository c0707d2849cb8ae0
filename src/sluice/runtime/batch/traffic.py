"""The traffic between key groups of consecutive keyed operators whose keys differ, as one
batch measured it (ALBIC's collocation input, section 4.3.2).

A keyed stage whose exchange carries each row's key group at the keyed operator before
(``plan.collocation.traffic_source``) counts its rows per (upstream key group, key group)
pair in its tasks (``stages._count_traffic``, a ``SparseCounts`` per task, summed by the
accumulator). Here, on the driver, a batch's counts become its metrics record:

- ``rows`` and ``local_rows``: the stage's input rows, and those whose two key groups the
  batch's Plan routes to the same partition index. Their ratio is the live *collocation
  factor*: the share of the stage's input that its partition q reads from the upstream
  stage's partition q (on a cluster, what Spark's reduce-locality preference can keep on one
  executor);
- ``pairs``: ``[upstream key group, key group, rows]``, the heaviest ``MAX_PAIRS_PER_K`` x K
  first (``dropped_rows``: the rows of the lighter pairs left out, so a line of
  ``metrics.jsonl`` stays small when the keys are unrelated and every pair occurs).
"""

from __future__ import annotations

import numpy as np

from sluice.core.metrics import Traffic
from sluice.plan.physical import Plan
from sluice.runtime.batch.task_metrics import SparseCounts

MAX_PAIRS_PER_K = 8


def traffic_metrics(counted: dict[str, dict[str, SparseCounts]], plan: Plan) -> dict[str, Traffic]:
    """Keyed operator id -> its traffic from the keyed operator before, as recorded per batch,
    from the tasks' counts (``TaskFigures.traffic``: operator -> upstream -> counts)."""
    out: dict[str, Traffic] = {}
    k = plan.max_parallelism
    for op_id, by_upstream in counted.items():
        for upstream, counts in by_upstream.items():
            if upstream not in plan.keyed or op_id not in plan.keyed:
                continue
            up, kg = counts.codes // k, counts.codes % k
            local = np.asarray(plan.keyed[upstream].routing)[up] == np.asarray(plan.keyed[op_id].routing)[kg]
            keep = np.argsort(-counts.counts, kind="stable")[: MAX_PAIRS_PER_K * k]
            out[op_id] = Traffic(
                upstream=upstream,
                rows=counts.total(),
                local_rows=int(counts.counts[local].sum()),
                pairs=np.stack([up[keep], kg[keep], counts.counts[keep]], axis=1).tolist(),
                dropped_rows=int(counts.total() - counts.counts[keep].sum()),
            )
    return out
