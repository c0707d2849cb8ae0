"""Reading the keyed state a job keeps in its checkpoint (docs/state.md, "Reading state").

    import sluice
    counts = sluice.state.read("ckpt", "counts")            # as of the last committed batch
    earlier = sluice.state.read("ckpt", "counts", batch=3)  # as of batch 3

The read never writes into the checkpoint and takes no lease: it works while the job runs.
"""

from sluice.graph.ttl import ttl
from sluice.runtime.state.reader import StatefulOperator, committed_batches, kept_batches, read, stateful_operators

__all__ = ["StatefulOperator", "committed_batches", "kept_batches", "read", "stateful_operators", "ttl"]
