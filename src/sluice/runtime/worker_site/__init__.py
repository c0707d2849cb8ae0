"""The start-up hook of the Python processes Spark starts for a job (``sitecustomize``).

Spark puts its own copies of PySpark and Py4J (``pyspark/python/lib/*.zip``) and the
``spark-core`` jar at the head of every Python process's path: its workers, and the
processes that look up, create and plan a Python data source. Where PySpark is installed
as a package (``pip install pyspark``, as Sluice requires), those copies are the installed
package's own, and they cost twice:

- a zip holds sources only, so every new process compiles the PySpark modules it imports
  (some 0.5 s of CPU each on an idle machine, against 0.1 s from the installed package's
  bytecode);
- a worker's first task calls ``importlib.invalidate_caches()``, which re-reads the
  directory of every zip and jar on the path: about 0.1 s for the jar's 6,000 entries.

``runtime.session`` puts this directory first on the ``PYTHONPATH`` the JVM hands its
Python processes; :mod:`sitecustomize` there drops those entries when the installed package
is the one they copy. ``SLUICE_WORKER_SITE=0`` turns it off.
"""

import os

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
