"""Chaos: a running job's disk filled mid-run and freed. The job must stop with a clear error
naming the disk problem, leave no temporary file behind, and, once space is freed and it is
started again on the same checkpoint, run to the end with outputs exactly those of a run on
a normal disk.

The job (tests/pipelines/disk_full.py): a finite generator (200 keys, event times in order)
into a running count per key and a tumbling 10 s window per key, each into a Parquet files
sink. Its checkpoint and both sinks live on a small tmpfs the scenario mounts (root only).
Each fill: ``sluice run`` the job from an empty checkpoint; after a random number of
committed batches, write a filler file until the disk refuses (ENOSPC): the first fill the
moment a batch is recorded done (Spark is then writing its commit log, Sluice the batch's
metrics line), the others a random fraction of a second later (the next batch's offsets,
state, sink files or records); wait for the job to stop; look for temporary files; delete
the filler; run the job again on the same checkpoint to the end of its input; compare.

- ``clear_errors``: fills after which the job exited non-zero with Sluice's one-line error
  naming the disk problem ("No space left on device"), no traceback and no hang;
- ``temporary_files_left``: temporary files the stopped job left on the disk (must be 0);
- ``lost`` / ``duplicated``: input rows counted too few / too many times, per key: the
  final count (from the latest batch that updated the key) and the windows' counts summed,
  against the source's rows generated again (as benchmarks/chaos.py counts);
- ``outputs_equal``: every sink's rows, batch by batch, equal a reference run's on a normal
  disk;
- ``resume_s``: per fill, the restart's launch to its first committed batch.

``run(quick)`` is for benchmarks/chaos.py to call; ``main()`` prints its result as one JSON
line (``.venv/bin/python -c "from benchmarks import chaos_disk; chaos_disk.main(['--quick'])"``).
Quick: one fill. Full: five, each at a different moment.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "tests" / "pipelines" / "disk_full.py"
ROWS, PER_BATCH = 24_000, 2_000
SINKS = ("counts", "windows")
DISK_SIZE = "16m"  # the whole run needs some 2 MB: the fill, not the size, is what stops it
ERROR = "sluice: error: "


# ---- the disk ------------------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(where: str, size: str = DISK_SIZE) -> Iterator[str]:
    """A tmpfs of ``size`` mounted at ``where`` (made if missing), unmounted on the way out
    whatever happened (lazily: a process still holding a file there cannot keep it)."""
    if os.geteuid() != 0:
        raise PermissionError("mounting a tmpfs needs root")
    os.makedirs(where, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", where], check=False)


def fill(disk: str) -> str:
    """Write a filler file on ``disk`` until it refuses (ENOSPC), in smaller and smaller
    pieces so that not even a page is left; returns the filler's path."""
    path = os.path.join(disk, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for piece in (1 << 20, 1 << 16, 1 << 12, 1):
            chunk = b"\0" * piece
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, chunk)
    finally:
        os.close(fd)
    return path


def temporary_files(where: str) -> list[str]:
    """Temporary files and directories under ``where``: Sluice's (``.<name>.tmp-<id>``),
    Spark's checkpoint log's (``.<n>.<id>.tmp``) and a files sink's (``_temporary``)."""
    found = []
    for d, dirs, files in os.walk(where):
        found += [os.path.join(d, n) for n in dirs if n == "_temporary"]
        found += [os.path.join(d, f) for f in files if ".tmp" in f]
    return sorted(os.path.relpath(p, where) for p in found)


# ---- the job -------------------------------------------------------------------------------
def launch(out: str, checkpoint: str, log: str, rows: int = ROWS, per_batch: int = PER_BATCH) -> subprocess.Popen:
    """``sluice run`` the job in its own process group, its stdout and stderr to ``log``."""
    env = dict(
        os.environ,
        SLUICE_MASTER="local[2]",
        SLUICE_TEST_OUT=out,
        SLUICE_TEST_ROWS=str(rows),
        SLUICE_TEST_PER_BATCH=str(per_batch),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    with open(log, "ab") as f:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "sluice", "run", str(PIPELINE), "--checkpoint", checkpoint, "--quiet"],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def done_batches(checkpoint: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", "*.done.json"))}


def finish(proc: subprocess.Popen, timeout: float) -> int | None:
    """The job's exit code, or None if it had not stopped within ``timeout`` s (a hang: then
    its process group is killed)."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
        return None


def first_commit(proc: subprocess.Popen, checkpoint: str, before: set[int], launched: float, timeout: float) -> float | None:
    """Seconds from ``launched`` to the first batch the job commits beyond ``before`` (None:
    it ended or timed out first)."""
    while time.time() - launched < timeout:
        if done_batches(checkpoint) - before:
            return time.time() - launched
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def error_line(log: str) -> str:
    """Sluice's one-line error in ``log`` (empty if there is none)."""
    text = Path(log).read_text(errors="replace")
    return next((line for line in reversed(text.splitlines()) if line.startswith(ERROR)), "")


def is_clear(returncode: int | None, error: str, log: str) -> bool:
    """The job stopped (no hang) with Sluice's error naming the disk problem, and printed no
    Python traceback nor Java stack trace to bury it."""
    text = Path(log).read_text(errors="replace")
    buried = "Traceback" in text or "\tat org.apache" in text
    return returncode not in (None, 0) and "No space left on device" in error and not buried


# ---- one fill ------------------------------------------------------------------------------
@dataclass
class Fill:
    """What one fill did: when it came, how the job stopped, what it left, the resume."""

    after_batches: int
    delay_s: float
    returncode: int | None  # None: the job hung on the full disk
    error: str
    clear: bool
    leftovers: list[str]
    resume_s: float | None
    resumed_returncode: int | None
    log: str  # the run that met the full disk
    resumed_log: str
    done_at_fill: list[int] = field(default_factory=list)


def fill_and_resume(
    disk: str, logs: str, after_batches: int, delay_s: float, rows: int = ROWS, per_batch: int = PER_BATCH, timeout: float = 240
) -> Fill:
    """Run the job on ``disk`` (its checkpoint in ``disk/checkpoint``, its sinks in
    ``disk/out``); once ``after_batches`` batches are committed and ``delay_s`` more seconds
    have passed, fill the disk; wait for the job to stop; free the space; run it again to the
    end of its input. The two runs' output goes to ``logs``.fill.log and ``logs``.resume.log."""
    out, checkpoint = os.path.join(disk, "out"), os.path.join(disk, "checkpoint")
    log, resumed_log = f"{logs}.fill.log", f"{logs}.resume.log"
    proc = launch(out, checkpoint, log, rows, per_batch)
    deadline = time.time() + timeout
    while len(done_batches(checkpoint)) < after_batches and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(delay_s)
    if proc.poll() is not None:
        raise RuntimeError(f"the job ended ({proc.returncode}) before the disk was filled; see {log}")
    done_at_fill = sorted(done_batches(checkpoint))
    filler = fill(disk)
    returncode = finish(proc, timeout)
    error = error_line(log)
    clear = is_clear(returncode, error, log)
    leftovers = temporary_files(disk)
    os.remove(filler)
    before = done_batches(checkpoint)
    launched = time.time()
    proc = launch(out, checkpoint, resumed_log, rows, per_batch)
    resume_s = first_commit(proc, checkpoint, before, launched, timeout)
    resumed = finish(proc, timeout)
    return Fill(after_batches, delay_s, returncode, error, clear, leftovers, resume_s, resumed, log, resumed_log, done_at_fill)


def recovery_s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s"


# ---- the outputs ---------------------------------------------------------------------------
Rows = dict[str, dict[int, list[tuple]]]


def outputs(out: str) -> Rows:
    """Sink -> batch id -> its rows, sorted, from the complete batch directories."""
    import pyarrow.dataset as ds

    found: Rows = {}
    for sink in SINKS:
        per_batch = found.setdefault(sink, {})
        for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
            if not os.path.exists(os.path.join(d, "_SUCCESS")):
                continue  # not committed: not output
            files = sorted(f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0)
            rows = ds.dataset(files).to_table().to_pylist() if files else []
            per_batch[int(d.rsplit("=", 1)[1])] = sorted((tuple(sorted(r.items())) for r in rows), key=repr)
    return found


def source_counts(rows: int = ROWS, per_batch: int = PER_BATCH) -> Counter:
    """Per key, the source's rows: generated again, as the job generated them."""
    sys.path.insert(0, str(ROOT))
    from tests.pipelines import disk_full

    spec = disk_full.readings(rows, per_batch)
    meters = [m for b in spec.generate(0, rows, int(disk_full.START_TIME * 1e6)) for m in b.column("meter").to_pylist()]
    return Counter(meters)


def counted(got: Rows) -> dict[str, Counter]:
    """Per output, per key, the rows it accounts for: the count of the latest batch that
    updated the key, and the windows' counts summed."""
    latest: dict[str, tuple[int, int]] = {}
    for batch, rows in sorted(got.get("counts", {}).items()):
        for row in rows:
            r = dict(row)
            latest[r["meter"]] = (batch, r["n"])
    windows: Counter = Counter()
    for rows in got.get("windows", {}).values():
        for row in rows:
            r = dict(row)
            windows[r["meter"]] += r["n"]
    return {"counts": Counter({k: n for k, (_, n) in latest.items()}), "windows": windows}


def lost_and_duplicated(truth: Counter, got: Rows) -> tuple[int, int]:
    """Input rows counted too few and too many times, summed over both outputs."""
    lost = duplicated = 0
    for per_key in counted(got).values():
        lost += sum((truth - per_key).values())
        duplicated += sum((per_key - truth).values())
    return lost, duplicated


def reference(workdir: str) -> Rows:
    """The outputs of an uninterrupted run on a normal disk."""
    out, checkpoint = os.path.join(workdir, "out"), os.path.join(workdir, "checkpoint")
    os.makedirs(workdir, exist_ok=True)
    log = os.path.join(workdir, "reference.log")
    if finish(launch(out, checkpoint, log), 300) != 0:
        raise RuntimeError(f"the reference run failed; see {log}")
    return outputs(out)


# ---- the scenario --------------------------------------------------------------------------
def run(quick: bool, seed: int = 1) -> dict:
    """Fill the job's disk mid-run and free it, once (quick) or five times at different
    moments (full); the figures of the module's docstring."""
    started = time.time()
    rng = random.Random(seed)
    truth = source_counts()
    workdir = tempfile.mkdtemp(prefix="sluice-chaos-disk-")
    try:
        expected = reference(os.path.join(workdir, "reference"))
        fills, lost, duplicated, equal = [], 0, 0, True
        for i in range(1 if quick else 5):
            with tmpfs(os.path.join(workdir, f"disk{i}")) as disk:
                logs = os.path.join(workdir, f"run{i}")
                after, delay = rng.randint(1, ROWS // PER_BATCH - 4), 0.0 if i == 0 else rng.uniform(0, 1)
                one = fill_and_resume(disk, logs, after_batches=after, delay_s=delay)
                got = outputs(os.path.join(disk, "out"))
            fills.append(one)
            n_lost, n_dup = lost_and_duplicated(truth, got)
            lost, duplicated, equal = lost + n_lost, duplicated + n_dup, equal and got == expected
            print(
                f"  fill {i + 1} after {one.after_batches} batches + {one.delay_s:.2f} s: exit {one.returncode}, "
                f"{one.error[len(ERROR) :][:120] or 'no error line'}; temporary files {one.leftovers or 'none'}; "
                f"resumed in {recovery_s(one.resume_s)}, exit {one.resumed_returncode}; lost {n_lost}, duplicated {n_dup}, "
                f"equal {got == expected}",
                flush=True,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "fills": len(fills),
        "clear_errors": sum(f.clear for f in fills),
        "temporary_files_left": sum(len(f.leftovers) for f in fills),
        "lost": lost,
        "duplicated": duplicated,
        "outputs_equal": equal and all(f.resumed_returncode == 0 for f in fills),
        "resume_s": [None if f.resume_s is None else round(f.resume_s, 2) for f in fills],
        "wall_s": round(time.time() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Print ``run``'s result as one JSON line (exit 1 unless every fill was exact and clear)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one fill (full: five)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.quick, args.seed)
    print(json.dumps({"benchmark": "chaos_disk", "mode": "quick" if args.quick else "full", **result}), flush=True)
    ok = result["clear_errors"] == result["fills"] and result["outputs_equal"]
    ok = ok and not result["lost"] + result["duplicated"] + result["temporary_files_left"]
    return 0 if ok else 1
