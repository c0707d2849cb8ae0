"""Key-group communication graph and METIS calls shared by ALBIC and COLA."""

from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp

WEIGHT_SCALE = 1000  # METIS wants integer weights; loads/rates are scaled to keep 3 digits


def undirected_traffic(num_key_groups: int, src: np.ndarray, dst: np.ndarray, rate: np.ndarray) -> sp.csr_matrix:
    """Symmetric matrix: entry (a, b) = traffic a->b plus b->a; no self loops."""
    keep = src != dst
    m = sp.coo_matrix((rate[keep], (src[keep], dst[keep])), shape=(num_key_groups, num_key_groups)).tocsr()
    return (m + m.T).tocsr()


def _integer_weights(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    top = values.max() if len(values) and values.max() > 0 else 1.0
    return np.maximum(1, np.round(values / top * WEIGHT_SCALE)).astype(np.int64)


def metis_split(members: np.ndarray, vertex_weight: np.ndarray, traffic: sp.csr_matrix, parts: int) -> list[np.ndarray]:
    """Balanced partitioning of ``members`` into ``parts`` sets, minimizing the traffic cut.

    ``vertex_weight`` is per member. Empty parts are dropped; degenerate requests fall back to
    an even split by weight (METIS needs at least ``parts`` vertices).
    """
    members = np.asarray(members)
    parts = int(min(parts, len(members)))
    if parts <= 1:
        return [members]
    sub = traffic[members][:, members].tocsr()
    sub.eliminate_zeros()
    eweights = _integer_weights(sub.data) if sub.nnz else None
    try:
        _, parts_of = pymetis.part_graph(
            parts,
            adjacency=pymetis.CSRAdjacency(sub.indptr.astype(np.int64), sub.indices.astype(np.int64)),
            vweights=_integer_weights(vertex_weight),
            eweights=eweights,
        )
        membership = np.asarray(parts_of)
    except Exception:  # pragma: no cover - METIS rejects a few degenerate graphs; split by weight instead
        order = np.argsort(-np.asarray(vertex_weight))
        membership = np.empty(len(members), dtype=np.int64)
        membership[order] = np.arange(len(members)) % parts
    membership = np.asarray(membership)
    out = [members[membership == p] for p in range(parts)]
    return [p for p in out if len(p)]
