"""Cold start: seconds from the command ``python -m omni_sfp.train ...`` to the end of its first iteration.

Each repetition starts the real command in a fresh process with ``progress_file=`` set and watches that file:
the first line appears when the first iteration (rollout + update) has ended. The line itself says how long
that iteration took, so the report splits the wall time into *start-up* (interpreter, imports, config, env,
model and agent) and the *first iteration*. The whole-process figure is what a user waits; the split says
where to cut; the process's CPU time at that moment is the figure that a busy machine disturbs least.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

POLL_S = 0.005


def time_to_first_iteration(overrides: list[str], *, threads: int, timeout_s: float = 600.0) -> dict[str, float]:
    """One cold start: the wall time to the first progress line, and that iteration's own duration."""
    with tempfile.TemporaryDirectory(prefix="omni_sfp_cold_") as folder:
        progress = Path(folder) / "progress.jsonl"
        command = [
            sys.executable,
            "-m",
            "omni_sfp.train",
            *overrides,
            "max_iterations=2",
            f"progress_file={progress}",
            "experiment=coldstart",
        ]
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        start = time.perf_counter()
        process = subprocess.Popen(
            command, cwd=folder, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            while not (progress.is_file() and progress.read_text().endswith("\n")):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"`{' '.join(command)}` exited with {process.returncode} before its first "
                        f"iteration: {process.stderr.read().strip()[-500:]}"
                    )
                if time.perf_counter() - start > timeout_s:
                    raise RuntimeError(f"no first iteration after {timeout_s:.0f} s: `{' '.join(command)}`")
                time.sleep(POLL_S)
            wall = time.perf_counter() - start
            cpu = _cpu_seconds(process.pid)
        finally:
            process.kill()
            process.wait()
        first = json.loads(progress.read_text().splitlines()[0])
    iteration = first["rollout_s"] + first["update_s"]
    return {"to_first_iteration_s": wall, "first_iteration_s": iteration, "startup_s": wall - iteration, "cpu_s": cpu}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads (Linux /proc; NaN elsewhere): unlike
    the wall time, it hardly grows when other processes share the cores."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def measure_cold_start(overrides: list[str], *, repetitions: int, threads: int) -> dict[str, Any]:
    """``repetitions`` cold starts; medians and ranges of each figure."""
    runs = [time_to_first_iteration(overrides, threads=threads) for _ in range(repetitions)]
    summary: dict[str, Any] = {"overrides": overrides, "runs": runs}
    for key in runs[0]:
        values = [run[key] for run in runs]
        summary[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return summary


def markdown(summary: dict[str, Any]) -> str:
    command = " ".join(["python -m omni_sfp.train", *summary["overrides"]])
    lines = [
        f"Cold start of `{command}` ({len(summary['runs'])} runs, medians [min-max]):",
        "",
        "| to the end of iteration 1 | start-up (before iteration 1) | iteration 1 | CPU time to the end of "
        "iteration 1 |",
        "|---|---|---|---|",
    ]
    cells = [
        f"{summary[k]['median']:.2f} s [{summary[k]['min']:.2f}-{summary[k]['max']:.2f}]"
        for k in ("to_first_iteration_s", "startup_s", "first_iteration_s", "cpu_s")
    ]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
