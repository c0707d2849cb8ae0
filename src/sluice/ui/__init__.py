"""What a person sees of a running (or finished) job: the live dashboard and the Prometheus
endpoint, both served from one small HTTP server that reads the job's checkpoint.

    sluice run PIPELINE.py --ui      # serve while the job runs
    sluice ui CHECKPOINT             # serve a job running elsewhere, or finished

Everything shown comes from files the job writes anyway (``metrics.jsonl``,
``decisions.jsonl``, the plan log), so the dashboard needs no hook into the running job and
shows a finished one exactly as it ran.
"""

from sluice.ui.server import DashboardServer, serve

__all__ = ["DashboardServer", "serve"]
