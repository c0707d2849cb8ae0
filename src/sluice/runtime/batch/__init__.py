"""One micro-batch, end to end, in one wing: the executor's numbered steps (``executor``), the
batch's DataFrames built from the plan (``compile``), the stages its tasks run (``stages``, each
task given one ``task_env.TaskEnv``), what its tasks measure (``task_metrics``, ``traffic``) and
the record made of it (``metrics``), event time (``event_time``), and the one interface the job
listens through (``listener``)."""
