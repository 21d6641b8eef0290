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

from omni_sfp.bench.ceiling import measure_ceiling, update_flops
from omni_sfp.bench.configs import ROWS, Row, Work, precision_effect


class UpdateClock:
    """Timestamps at the end of every PPO update (after a device sync on CUDA, so queued work is counted)."""

    def __init__(self, device: torch.device) -> None:
        self.times: list[float] = []
        self.cpu_times: list[float] = []  # the process's CPU seconds at each tick
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None

    def tick(self) -> None:
        if self._sync is not None:
            self._sync()
        self.times.append(time.perf_counter())
        self.cpu_times.append(time.process_time())


class RolloutClock:
    """Timestamps at the return of every ``horizon``-th env step: the end of a rollout, for any framework (they
    all step this one env object). A rollout runs from the end of the previous update to that moment."""

    def __init__(self, env, horizon: int) -> None:
        self.times: list[float] = []
        self._step, self._horizon, self._count = env.step, horizon, 0
        self._sync = torch.cuda.synchronize if env.device.type == "cuda" else None
        env.step = self.step  # an instance attribute: what the trainers and rl_games' adapter call

    def step(self, actions):
        result = self._step(actions)
        self._count += 1
        if not self._count % self._horizon:
            self.tick()
        return result

    def tick(self) -> None:
        """The end of a rollout now: the env calls it every ``horizon`` steps, the floor (no env) itself."""
        if self._sync is not None:
            self._sync()
        self.times.append(time.perf_counter())


def split(update_ends: list[float], rollout_ends: list[float], warmup: int) -> tuple[list[float], list[float]]:
    """Rollout and learning seconds of each timed update: ``update_ends`` and ``rollout_ends`` hold one time per
    update, the first ``warmup`` untimed."""
    rollouts = [end - start for start, end in zip(update_ends[warmup - 1 : -1], rollout_ends[warmup:])]
    learning = [end - start for start, end in zip(rollout_ends[warmup:], update_ends[warmup:])]
    return rollouts, learning


def measure(
    row: Row,
    work: Work,
    *,
    device: str,
    seed: int,
    threads: int,
    scratch: str | Path,
    replay: str | Path | None = None,
    rlgames_compile: bool = False,
) -> dict[str, Any]:
    """Run ``row`` once on the benchmark env and return its timings and notes."""
    from skrl.utils import set_seed

    from omni_sfp.bench.envs import make_bench_env

    torch.set_num_threads(threads)
    set_seed(seed)
    env = make_bench_env(work, device=device, seed=seed, replay=replay)
    clock = UpdateClock(env.device)
    if row.framework == "ceiling":
        return _ceiling(row, work, env)
    rollout_clock = RolloutClock(env, work.horizon)
    start = time.perf_counter()  # building the row's trainer and its first update: first calls, compiling
    if row.framework == "omni":
        from omni_sfp.bench.omni import run_omni

        info = run_omni(env, work, row, device=device, seed=seed, on_update=clock.tick)
    elif row.framework == "skrl":
        from omni_sfp.bench.skrl_builtin import run_skrl_builtin

        info = run_skrl_builtin(env, work, row, device=device, seed=seed, on_update=clock.tick)
    elif row.framework == "rlgames":
        from omni_sfp.bench.rlgames import run_rlgames

        info = run_rlgames(
            env,
            work,
            row,
            seed=seed,
            threads=threads,
            train_dir=str(scratch),
            compile_model=rlgames_compile,
            on_update=clock.tick,
        )
    elif row.framework == "bare":
        from omni_sfp.bench.bare_ppo import run_bare_ppo

        info = run_bare_ppo(env, work, row, on_update=clock.tick)
    else:
        from omni_sfp.bench.floor import run_floor

        info = run_floor(env, work, row, on_update=clock.tick, on_rollout=rollout_clock.tick)
    if len(clock.times) != work.total_updates:
        raise RuntimeError(f"row {row.id}: {len(clock.times)} updates timed, expected {work.total_updates}")
    ends = clock.times[work.warmup_updates - 1 :]
    timing = {}
    skip = 1 if row.capture else 0  # a captured row's untimed first iteration (omni_sfp.bench.omni.run_omni)
    rollout_ends = rollout_clock.times[skip : skip + work.total_updates]
    if len(rollout_ends) == work.total_updates:
        rollouts, learning = split(clock.times, rollout_ends, work.warmup_updates)
        timing = {"rollout_seconds": rollouts, "learning_seconds": learning}
    return {
        **timing,
        "first_update_s": clock.times[0] - start,
        "flops_per_update": update_flops(work, env.observation_space.shape[0], env.action_space.shape[0]),
        "row": row.id,
        "seconds": ends[-1] - ends[0],
        # CPU seconds of the timed window: on a machine shared with other work, one thread's CPU time moves less
        # than its wall time (no wait for a core counts)
        "cpu_seconds": clock.cpu_times[-1] - clock.cpu_times[work.warmup_updates - 1],
        "update_seconds": [b - a for a, b in zip(ends, ends[1:])],
        "threads": torch.get_num_threads(),
        "precision": precision_effect(row, env.device.type),
        "info": info,
    }


def _ceiling(row: Row, work: Work, env) -> dict[str, Any]:
    """The GEMM ceiling in the shape of a timed run: ``updates`` updates at the ceiling's time each."""
    info = measure_ceiling(
        work,
        env.observation_space.shape[0],
        env.action_space.shape[0],
        mixed_precision=row.mixed_precision,
        device=env.device,
    )
    return {
        "row": row.id,
        "flops_per_update": info["flops_per_update"],
        "seconds": info["update_s"] * work.updates,
        "update_seconds": [info["update_s"]] * work.updates,
        "threads": torch.get_num_threads(),
        "precision": precision_effect(row, env.device.type),
        "info": info,
    }


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    work = Work(**{**spec["work"], "units": tuple(spec["work"]["units"])})
    result = measure(
        ROWS[spec["row"]],
        work,
        device=spec["device"],
        seed=spec["seed"],
        threads=spec["threads"],
        scratch=spec["scratch"],
        replay=spec["replay"],
        rlgames_compile=spec["rlgames_compile"],
    )
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
