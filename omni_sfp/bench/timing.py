"""Interleaved timing: every repetition runs every row once (A B C ... A B C ...), each run in a fresh process
with the same torch thread count, so slow drifts of the machine spread over all rows alike."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import omni_sfp
from omni_sfp.bench.configs import Row, Work

# the checkout (or site-packages) holding omni_sfp: workers import the very same code
_PACKAGE_ROOT = Path(omni_sfp.__file__).resolve().parent.parent


class WorkerError(RuntimeError):
    """A timed run failed; the message ends with the tail of its log."""


def run_worker(
    row: Row,
    work: Work,
    *,
    device: str,
    seed: int,
    threads: int,
    replay: str | None,
    rlgames_compile: bool,
    scratch: Path,
    tag: str,
) -> dict[str, Any]:
    """One run of ``row`` in a fresh ``python -m omni_sfp.bench.worker`` process; its output goes to a log."""
    run_dir = scratch / tag
    run_dir.mkdir(parents=True)
    spec = {
        "row": row.id,
        "work": dataclasses.asdict(work),
        "device": device,
        "seed": seed,
        "threads": threads,
        "replay": replay,
        "rlgames_compile": rlgames_compile,
        "scratch": str(run_dir),
    }
    (run_dir / "spec.json").write_text(json.dumps(spec))
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH")])),
    }
    with open(run_dir / "log.txt", "w") as log:
        completed = subprocess.run(
            [sys.executable, "-m", "omni_sfp.bench.worker", str(run_dir / "spec.json"), str(run_dir / "result.json")],
            cwd=run_dir,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if completed.returncode:
        tail = "\n".join((run_dir / "log.txt").read_text().splitlines()[-15:])
        raise WorkerError(f"row {row.id} failed (exit {completed.returncode}); log {run_dir / 'log.txt'}:\n{tail}")
    result = json.loads((run_dir / "result.json").read_text())
    shutil.rmtree(run_dir)  # rl_games' final checkpoint alone is ~45 MB on the big network
    return result


def run_interleaved(
    rows: list[Row],
    work: Work,
    *,
    repetitions: int,
    log: Callable[[str], None],
    deadline: float | None = None,
    **worker_kwargs,
) -> dict[str, list[dict[str, Any]]]:
    """``repetitions`` rounds over ``rows`` in order; returns each row's results in round order. With a
    ``deadline`` (``time.monotonic()``), no run starts after it: rows cut short keep the runs they finished."""
    runs: dict[str, list[dict[str, Any]]] = {row.id: [] for row in rows}
    for repetition in range(repetitions):
        for row in rows:
            if deadline is not None and time.monotonic() > deadline:
                log(f"[bench] time is up: {row.id} repetition {repetition + 1} and after not run")
                return {key: value for key, value in runs.items() if value}
            result = run_worker(row, work, tag=f"{repetition}-{row.id}", **worker_kwargs)
            runs[row.id].append(result)
            log(
                f"[bench] repetition {repetition + 1}/{repetitions} {row.id}: {result['seconds']:.2f} s "
                f"({result['seconds'] / work.updates:.3f} s/update)"
            )
    return runs
