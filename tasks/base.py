"""The batched, device-resident task base shared by the embedded tasks.

A step touches every environment with the same tensor operations: finished environments are reset with
``torch.where`` over freshly sampled initial states instead of gathering their indices, so a step never
synchronises with the host (``validate_actions`` checks for non-finite actions on the CPU only, where reading
one reduction back costs nothing).

A step's info dict holds ``"final_observations"``: the observations before the reset, i.e. the last
observation of every episode that ended in this step (elsewhere equal to the returned observations).
PPO's time-limit bootstrap needs it: a truncated episode is continued with the value of its *final*
state, not of the next episode's first one (Gymnasium's ``final_obs`` info, device-resident here).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium
import numpy as np
import torch

FINAL_OBSERVATIONS = "final_observations"  # the info key of the pre-reset observations


class VecTask(ABC):
    """Base of the embedded tasks: state, spaces, seeded generator, auto-reset and truncation.

    Subclasses implement :meth:`_sample_initial_state`, :meth:`_advance` and :meth:`_observations`. The state
    lives in ``self.state``, one row per environment, and is replaced, never modified in place, so returned
    observations are not overwritten by later steps. The base constructor draws the first state, so
    what ``_sample_initial_state`` needs beyond the base attributes must be set before ``super().__init__``.

    :param num_envs: Number of environments simulated together.
    :param device: Torch device holding the state and every returned tensor.
    :param seed: Seed of the task's own ``torch.Generator`` on ``device``: same seed, same episodes.
    :param max_episode_length: Steps after which an episode is truncated.
    :param observation_size: Length of an observation vector.
    :param action_size: Length of an action vector.
    :param action_bound: The action space is ``[-action_bound, action_bound]`` per component (``inf``:
        unbounded); whether out-of-bound actions are clipped is each task's to say.
    :param validate_actions: Check that actions are finite, on the CPU. Not on CUDA, where the check would cost a
        host synchronisation per step: there non-finite actions show up in the next observations, which the
        trainer checks at its update.
    """

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        seed: int,
        *,
        max_episode_length: int,
        observation_size: int,
        action_size: int,
        action_bound: float,
        validate_actions: bool,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if max_episode_length < 1:
            raise ValueError(f"max_episode_length must be at least 1, got {max_episode_length}")
        self.num_envs = int(num_envs)
        self.device = torch.empty(0, device=device).device  # concrete: "cuda" -> "cuda:0", as tensors report it
        self.seed = int(seed)
        self.max_episode_length = int(max_episode_length)
        self.observation_size = int(observation_size)
        self.action_size = int(action_size)
        self.validate_actions = validate_actions
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(self.seed)

        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.observation_size,), np.float32)
        self.action_space = gymnasium.spaces.Box(-action_bound, action_bound, (self.action_size,), np.float32)
        self.state_space = None

        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.state = self._sample_initial_state()

    @property
    def unwrapped(self) -> VecTask:
        """The task itself (Gymnasium's convention, which skrl's wrappers follow)."""
        return self

    def reset(self) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in every environment.

        :return: Observations ``(num_envs, observation_size)`` and an empty info dict.
        """
        self.state = self._sample_initial_state()
        self.episode_length = torch.zeros_like(self.episode_length)
        return self._observations(), {}

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every environment by one control step and reset the finished ones.

        :param actions: ``(num_envs, action_size)`` tensor on the task's device.
        :return: Observations (the first of the new episode where one ended), rewards ``(num_envs, 1)``,
            terminated and truncated ``(num_envs, 1)`` bool (never both), and an info dict whose
            ``"final_observations"`` are the observations before the reset (the ended episodes' last ones).
        :raises ValueError: The actions have the wrong shape, live on another device or are not finite.
        """
        actions = self._checked(actions)
        reward, terminated = self._advance(actions)
        self.episode_length = self.episode_length + 1
        truncated = (self.episode_length >= self.max_episode_length) & ~terminated
        done = terminated | truncated
        final_observations = self._observations()  # no copy needed: the state is replaced, never modified
        self.state = torch.where(done.unsqueeze(-1), self._sample_initial_state(), self.state)
        self.episode_length = torch.where(done, 0, self.episode_length)
        info = {FINAL_OBSERVATIONS: final_observations}
        return self._observations(), reward.unsqueeze(-1), terminated.unsqueeze(-1), truncated.unsqueeze(-1), info

    def close(self) -> None:
        """Nothing to release: the state is plain tensors."""

    def state_dict(self) -> dict[str, Any]:
        """Everything a later step depends on: the state, the episode lengths and the generator's state.

        What a task derives from its constructor arguments (spaces, system matrices) is not included; a
        task rebuilt with the same arguments and given this dict continues bitwise as the original would.
        Subclasses with more per-step state extend both methods.
        """
        return {
            "state": self.state,
            "episode_length": self.episode_length,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (tensors may come from another device: they are moved here).

        :raises ValueError: The state was saved with another number of environments or observation size.
        """
        expected = (self.num_envs, *self.state.shape[1:])
        if tuple(state["state"].shape) != expected:
            raise ValueError(f"task state has shape {tuple(state['state'].shape)}, this task's is {expected}")
        self.state = state["state"].to(self.device, self.state.dtype).clone()
        self.episode_length = state["episode_length"].to(self.device, torch.long).clone()
        self.generator.set_state(state["generator"].cpu())  # get_state() is a CPU byte tensor on every device

    def _checked(self, actions: torch.Tensor) -> torch.Tensor:
        expected_shape = (self.num_envs, self.action_size)
        if not isinstance(actions, torch.Tensor):
            raise ValueError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        if tuple(actions.shape) != expected_shape:
            raise ValueError(f"actions must have shape {expected_shape}, got {tuple(actions.shape)}")
        if actions.device != self.device:
            raise ValueError(f"actions must be on the task's device {self.device}, got {actions.device}")
        if self.validate_actions and actions.device.type == "cpu" and not bool(torch.isfinite(actions).all()):
            raise ValueError("actions contain NaN or infinite values")
        return actions.to(torch.float32)

    @abstractmethod
    def _sample_initial_state(self) -> torch.Tensor:
        """Draw a fresh initial state for every environment from ``self.generator``."""

    @abstractmethod
    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply ``actions`` to ``self.state``; return rewards ``(N,)`` float32 and terminated ``(N,)`` bool."""

    @abstractmethod
    def _observations(self) -> torch.Tensor:
        """Observations ``(N, observation_size)`` float32 of the current state."""
