"""Env overhead: how fast the product collects experience on a task, against the task's own step rate.

*bare*: the vector env alone, built as the product builds it (for ``gym:<Id>``: ``gymnasium.make_vec``,
synchronous, same-step autoreset), stepped with actions drawn from its action space. This is what the
simulator costs, and no trainer can collect faster.
*rollout*: the product's rollout loop (:meth:`omni_sfp.ppo.loop.Learner.rollout`: policy forward, skrl's wrapper,
the agent's memory, episode statistics and the final-observation bootstrap), without the updates.
The two are interleaved over repetitions in one process, and the report gives medians. The gap per env step,
in microseconds, is the product's own cost: what there is to close.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _bare_rate(cfg, steps: int, seed: int) -> float:
    """Env steps per second of the bare env under random actions (all envs counted), built as the product
    builds it (:func:`omni_sfp.envs.registry.make_env`). A Gymnasium id is stepped below skrl's wrapper, as the
    vector env itself."""
    import torch
    from omegaconf import OmegaConf

    from omni_sfp.config.values import num_envs
    from omni_sfp.envs.registry import GYM_PREFIX, make_env

    envs = num_envs(cfg)
    task_cfg = {k: v for k, v in OmegaConf.to_container(cfg.task.env, resolve=True).items() if k != "num_envs"}
    env = make_env(cfg.task.name, num_envs=envs, device="cpu", seed=seed, headless=True, task_cfg=task_cfg)
    if cfg.task.name.startswith(GYM_PREFIX):
        vector = env._env  # skrl's wrapper holds the Gymnasium vector env
        vector.reset(seed=seed)
        vector.action_space.seed(seed)

        def step() -> None:
            vector.step(vector.action_space.sample())
    else:
        env.reset()
        low = torch.as_tensor(env.action_space.low, dtype=torch.float32)
        high = torch.as_tensor(env.action_space.high, dtype=torch.float32)
        generator = torch.Generator().manual_seed(seed)

        def step() -> None:
            env.step(low + (high - low) * torch.rand((envs, *low.shape), generator=generator))

    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    env.close()
    return steps * envs / elapsed


def _rollout_rates(cfg, rollouts_timed: int) -> list[float]:
    """Env steps per second of the product's rollout loop, one figure per rollout of ``cfg.train.ppo.rollouts``
    steps (the first, which warms up, is dropped)."""
    from omni_sfp.config.values import num_envs
    from omni_sfp.run.runner import Runner

    runner = Runner(cfg, disable_progressbar=True)
    learner, env = runner.learner, runner.env
    learner.agent.enable_training_mode(True)
    learner.observations, _ = env.reset()
    learner.states = env.state()
    steps = int(cfg.train.ppo.rollouts)
    rates = []
    for index in range(rollouts_timed + 1):
        start = time.perf_counter()
        learner.rollout(steps * (rollouts_timed + 1))
        elapsed = time.perf_counter() - start
        learner.iteration += 1
        if index:
            rates.append(steps * num_envs(cfg) / elapsed)
    env.close()
    return rates


def measure_env_overhead(overrides: list[str], *, repetitions: int, rollouts: int = 4, seed: int = 0) -> dict[str, Any]:
    """``repetitions`` interleaved pairs (bare, rollout) on the task of ``overrides``; medians and ranges."""
    from omni_sfp.run.compose import load_config

    with tempfile.TemporaryDirectory(prefix="omni_sfp_envrate_") as folder:
        cfg = load_config([*overrides, f"seed={seed}", "device=cpu", f"runs_dir={Path(folder)}"])
        steps = rollouts * int(cfg.train.ppo.rollouts)
        bare, ours = [], []
        for _ in range(repetitions):
            bare.append(_bare_rate(cfg, steps, seed))
            ours.append(statistics.median(_rollout_rates(cfg, rollouts)))
    bare_median, ours_median = statistics.median(bare), statistics.median(ours)
    return {
        "overrides": overrides,
        "task": cfg.task.name,
        "num_envs": int(cfg.task.env.num_envs if cfg.num_envs is None else cfg.num_envs),
        "steps_per_repetition": steps,
        "bare_sps": bare,
        "rollout_sps": ours,
        "bare_median": bare_median,
        "rollout_median": ours_median,
        "ratio": ours_median / bare_median,
        # per env step (one env): what the product adds to the simulator's own cost
        "overhead_us_per_env_step": 1e6 * (1 / ours_median - 1 / bare_median),
        "ratio_per_repetition": [float(o / b) for o, b in zip(ours, bare)],
        "ratio_range": [float(np.min(np.array(ours) / np.array(bare))), float(np.max(np.array(ours) / np.array(bare)))],
    }


def markdown(summary: dict[str, Any]) -> str:
    low, high = summary["ratio_range"]
    return (
        f"Env overhead on `{summary['task']}` ({summary['num_envs']} envs, {len(summary['bare_sps'])} interleaved "
        f"repetitions of {summary['steps_per_repetition']} steps, medians):\n\n"
        "| bare vector env, random actions (SPS) | omni-sfp rollout (SPS) | rollout / bare | omni-sfp's own cost "
        "per env step |\n|---|---|---|---|\n"
        f"| {summary['bare_median']:.0f} | {summary['rollout_median']:.0f} | {summary['ratio']:.3f} "
        f"[{low:.3f}-{high:.3f}] | {summary['overhead_us_per_env_step']:.1f} us |\n"
    )
