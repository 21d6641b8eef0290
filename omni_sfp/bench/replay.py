"""Record any task once, replay it from device memory: "the sim held constant" at near-zero cost.

The reference table held the simulation constant across runs. Replaying a recording does that exactly: every
row sees the same observations, rewards and flags, and the env's own cost (a few gathers per step) is the
same for all of them, whatever the actions, so the timing compares the trainers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch


@dataclass
class Recording:
    """``steps`` transitions of ``num_envs`` envs: ``observations[t]`` is what the policy saw before step ``t``."""

    task: str
    observations: torch.Tensor  # (steps, num_envs, obs) float32
    rewards: torch.Tensor  # (steps, num_envs, 1) float32
    terminated: torch.Tensor  # (steps, num_envs, 1) bool
    truncated: torch.Tensor  # (steps, num_envs, 1) bool
    action_low: np.ndarray
    action_high: np.ndarray

    @property
    def steps(self) -> int:
        return self.observations.shape[0]

    @property
    def num_envs(self) -> int:
        return self.observations.shape[1]

    def save(self, path: str | Path) -> None:
        torch.save(dict(vars(self)), path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device) -> Recording:
        data = torch.load(path, map_location=device, weights_only=False)
        return cls(**data)


def record(task: str, *, steps: int, num_envs: int, device: str | torch.device, seed: int) -> Recording:
    """Step ``task`` (any registered name) ``steps`` times with seeded random actions and keep what it returned.

    Actions are uniform in the action space where it is bounded, standard normal where it is not: a
    policy-free stream with the task's real observation and reward statistics.
    """
    from omni_sfp.envs.registry import make_env

    env = make_env(task, num_envs=num_envs, device=device, seed=seed)
    generator = torch.Generator(device=env.device).manual_seed(seed)
    space = env.action_space
    low = torch.as_tensor(space.low, dtype=torch.float32, device=env.device)
    high = torch.as_tensor(space.high, dtype=torch.float32, device=env.device)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    observations, rewards, terminated, truncated = [], [], [], []
    obs, _ = env.reset()
    for _ in range(steps):
        noise = torch.rand((env.num_envs, *space.shape), generator=generator, device=env.device)
        normal = torch.randn((env.num_envs, *space.shape), generator=generator, device=env.device)
        actions = torch.where(bounded, low + (high - low) * noise, normal)
        observations.append(obs)
        obs, reward, term, trunc, _ = env.step(actions)
        rewards.append(reward.float().view(-1, 1))
        terminated.append(term.bool().view(-1, 1))
        truncated.append(trunc.bool().view(-1, 1))
    env.close()
    return Recording(
        task,
        torch.stack(observations).float(),
        torch.stack(rewards),
        torch.stack(terminated),
        torch.stack(truncated),
        space.low.copy(),
        space.high.copy(),
    )


class ReplayTask:
    """A task that plays a :class:`Recording` back, with the embedded tasks' interface (``VecTask``'s).

    Env ``i`` plays its own recorded stream from position ``phase[i]`` on and loops: after the last recorded
    step it returns the first recorded observation with ``truncated`` set, as a time limit of ``steps`` with
    auto-reset would. Staggered phases (the default) spread those loop points over the steps, so some env
    truncates on most steps, as in a long run of a GPU simulator; ``phase=0`` replays the recording in step.
    Actions are checked for shape and device, then ignored.
    """

    def __init__(self, recording: Recording, *, phase: torch.Tensor | int | None = None) -> None:
        self.recording = recording
        self.device = recording.observations.device
        self.num_envs = recording.num_envs
        self.max_episode_length = recording.steps
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, recording.observations.shape[2:], np.float32)
        self.action_space = gymnasium.spaces.Box(recording.action_low, recording.action_high, dtype=np.float32)
        self.state_space = None
        env_index = torch.arange(self.num_envs, device=self.device)
        if phase is None:
            phase = env_index * recording.steps // self.num_envs
        self.phase = torch.as_tensor(phase, device=self.device).expand(self.num_envs) % recording.steps
        self._env_index = env_index
        self._t = 0

    @property
    def unwrapped(self) -> ReplayTask:
        return self

    def reset(self) -> tuple[torch.Tensor, dict[str, Any]]:
        self._t = 0
        return self.recording.observations[self.phase, self._env_index], {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        expected = (self.num_envs, *self.action_space.shape)
        if tuple(actions.shape) != expected or actions.device != self.device:
            raise ValueError(
                f"actions must have shape {expected} on {self.device}, got {tuple(actions.shape)} on {actions.device}"
            )
        rec, env = self.recording, self._env_index
        position = (self.phase + self._t) % rec.steps
        following = (position + 1) % rec.steps
        terminated = rec.terminated[position, env]
        truncated = rec.truncated[position, env] | ((following == 0).unsqueeze(-1) & ~terminated)
        self._t += 1
        return rec.observations[following, env], rec.rewards[position, env], terminated, truncated, {}

    def close(self) -> None:
        """Nothing to release: the recording stays with its owner."""
