"""The job: what wires a pipeline's run together, above both the data plane (``runtime``) and
the control plane (``control``).

``RunOptions`` is how a run is asked for (``Pipeline.run`` and ``sluice run`` both build one);
``run.run_pipeline`` starts the Spark session, opens the sources (``job.sources``), takes the
checkpoint's lease, builds the controller and hands the batch executor one listener
(``job.listener``); ``realtime.run_realtime`` runs a pipeline in Spark's real-time mode.
Importing this package does not import Spark: ``run`` and ``realtime`` do, when a job runs.
"""

from sluice.job.options import RunOptions
from sluice.job.result import JobResult

__all__ = ["JobResult", "RunOptions"]
