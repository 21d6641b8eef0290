"""The env every row runs on: ConstantCost with staggered episode starts, or a replayed recording."""

from __future__ import annotations

from pathlib import Path

import torch

from omni_sfp.bench.configs import Work
from omni_sfp.bench.replay import Recording, ReplayTask
from omni_sfp.envs.embedded import EmbeddedEnvWrapper
from omni_sfp.envs.registry import make_env


class StaggeredStart(EmbeddedEnvWrapper):
    """An embedded task whose first episodes start at evenly spread points of its time limit.

    In a short run that starts every env at step 0 no episode reaches the time limit, so skrl's time-limit
    bootstrap (it runs only on steps where some env truncated) would never show its cost. A long GPU run
    settles where episode ends are spread over the steps; this starts there, as rsl_rl's
    ``init_at_random_ep_len`` does, but deterministically, so that every row sees the same stream.
    """

    def reset(self):
        observations, info = super().reset()
        task = self._env
        task.episode_length = torch.arange(task.num_envs, device=task.device) * task.max_episode_length // task.num_envs
        return observations, info


def make_bench_env(work: Work, *, device: str | torch.device, seed: int, replay: str | Path | None = None):
    """A skrl wrapper of the benchmark env: ConstantCost (fixed work per step, actions not validated, so the
    env adds no host sync), ``work.task`` with its training defaults (Cartpole validates actions: one host sync
    per step, for every row alike), or the recording at ``replay`` played back from ``device`` memory."""
    if replay is not None:
        recording = Recording.load(replay, device)
        if recording.num_envs != work.num_envs:
            raise ValueError(f"recording {replay} has {recording.num_envs} envs, the work asks for {work.num_envs}")
        return EmbeddedEnvWrapper(ReplayTask(recording))
    if work.task != "ConstantCost":  # a learnable task as `python -m omni_sfp.train` builds it (its own settings)
        return make_env(
            work.task,
            num_envs=work.num_envs,
            device=device,
            seed=seed,
            task_cfg={"max_episode_length": work.episode_length},
        )
    env = make_env(
        "ConstantCost",
        num_envs=work.num_envs,
        device=device,
        seed=seed,
        task_cfg={
            "max_episode_length": work.episode_length,
            "validate_actions": False,
            "observation_size": work.observation_size,
            "action_size": work.action_size,
        },
    )
    return StaggeredStart(env._env)
