"""One timed run of one row: ``python -m omni_sfp.bench.worker SPEC.json RESULT.json`` (a fresh process per run).

:func:`measure` is also callable in-process (the tests do). A run trains ``warmup_updates + updates`` PPO
updates; the clock ticks at the end of each, and the timed window runs from the end of the last warm-up
update to the end of the last one, so imports, building and first-call costs stay out of it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from omni_sfp.bench.configs import ROWS, Row, Work, precision_effect


class UpdateClock:
    """Timestamps at the end of every PPO update (after a device sync on CUDA, so queued work is counted)."""

    def __init__(self, device: torch.device) -> None:
        self.times: list[float] = []
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None

    def tick(self) -> None:
        if self._sync is not None:
            self._sync()
        self.times.append(time.perf_counter())


def measure(row: Row, work: Work, *, device: str, seed: int, threads: int, scratch: str | Path,
            replay: str | Path | None = None, rlgames_compile: bool = False) -> dict[str, Any]:
    """Run ``row`` once on the benchmark env and return its timings and notes."""
    from skrl.utils import set_seed

    from omni_sfp.bench.envs import make_bench_env

    torch.set_num_threads(threads)
    set_seed(seed)
    env = make_bench_env(work, device=device, seed=seed, replay=replay)
    clock = UpdateClock(env.device)
    if row.framework == "omni":
        from omni_sfp.bench.omni import run_omni

        info = run_omni(env, work, row, device=device, seed=seed, on_update=clock.tick)
    elif row.framework == "skrl":
        from omni_sfp.bench.skrl_builtin import run_skrl_builtin

        info = run_skrl_builtin(env, work, row, device=device, seed=seed, on_update=clock.tick)
    elif row.framework == "rlgames":
        from omni_sfp.bench.rlgames import run_rlgames

        info = run_rlgames(env, work, row, seed=seed, threads=threads, train_dir=str(scratch),
                           compile_model=rlgames_compile, on_update=clock.tick)
    else:
        from omni_sfp.bench.floor import run_floor

        info = run_floor(env, work, row, on_update=clock.tick)
    if len(clock.times) != work.total_updates:
        raise RuntimeError(f"row {row.id}: {len(clock.times)} updates timed, expected {work.total_updates}")
    ends = clock.times[work.warmup_updates - 1:]
    return {
        "row": row.id,
        "seconds": ends[-1] - ends[0],
        "update_seconds": [b - a for a, b in zip(ends, ends[1:])],
        "threads": torch.get_num_threads(),
        "precision": precision_effect(row, env.device.type),
        "info": info,
    }


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    work = Work(**{**spec["work"], "units": tuple(spec["work"]["units"])})
    result = measure(ROWS[spec["row"]], work, device=spec["device"], seed=spec["seed"], threads=spec["threads"],
                     scratch=spec["scratch"], replay=spec["replay"], rlgames_compile=spec["rlgames_compile"])
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
