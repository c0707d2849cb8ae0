"""``sluice warm``: record Spark's class archive once, so every later start is faster.

The first Spark session on a machine records the classes its JVM loads into an archive
(``runtime.session.ClassArchive``); later sessions map them instead of loading them: the
JVM-and-SparkSession part of a start fell from 7.4 s to 4.8 s on an idle 2-core machine.
``make`` runs this once after installing, so the demo's first run and the test suite's
many Spark processes start from the archive rather than each paying for recording it.
The archive is recorded from a short run of the demo pipeline, so that the classes a
streaming job needs (Python data sources, Arrow, ``foreachBatch``, state) are in it.
"""

from __future__ import annotations

import os
import tempfile
import time


def register(subparsers) -> None:
    p = subparsers.add_parser("warm", help="record Spark's class archive once (faster starts afterwards)")
    p.add_argument("--seconds", type=float, default=6.0, help="how long the recording run lasts (default 6)")
    p.set_defaults(func=main)


def main(args) -> int:
    from sluice.runtime.session import class_archive

    archive = class_archive()
    if archive is None:
        print("sluice warm: the class archive is turned off (SLUICE_CLASS_ARCHIVE=0 or no cache directory)")
        return 0
    if archive.exists():
        print(f"sluice warm: class archive in place ({archive.path})")
        return 0
    from sluice.demo import build_pipeline

    started = time.time()
    print("sluice warm: recording Spark's class archive from a short demo run (once per machine) ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="sluice-warm-") as work:
        pipeline = build_pipeline(work, rate=2_000)
        pipeline.run(os.path.join(work, "checkpoint"), master="local[2]", duration=args.seconds, ui=False)
    # the archive itself is written as this process exits (the JVM writes it on its way out)
    print(f"sluice warm: recorded in {time.time() - started:.0f} s; writing {archive.path}", flush=True)
    return 0
