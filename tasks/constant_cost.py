"""A benchmark task whose simulation cost per step is fixed, so timings compare trainers, not episodes."""

from __future__ import annotations

import torch

from .base import VecTask


class ConstantCost(VecTask):
    """Fixed, data-independent work per step: the timing baseline of the benchmarks.

    Every step runs the same ``substeps`` updates ``s <- tanh(s W + a V)`` on every environment (``W`` and
    ``V`` fixed Gaussian matrices from ``system_seed``, ``W`` scaled to spectral norm 0.9); no episode
    terminates and all of them truncate together every ``max_episode_length`` steps, so the amount of work
    never depends on the policy or the data. The reward ``-mean((s - s_target)^2)`` after the update is a
    deterministic function of state and action; ``s_target`` is the fixed point reached by holding a fixed
    action ``a_target`` (from ``system_seed``), so the policy has a non-trivial optimum to learn
    (``target_action`` and ``target_state`` attributes).
    Observation: ``s``; action: ``a`` in [-1, 1] (clipped).

    :param num_envs: Number of environments.
    :param device: Torch device of the state.
    :param seed: Seed of the task's generator (initial states).
    :param observation_size: Length of ``s`` (60: Ant's observation).
    :param action_size: Length of ``a`` (8: Ant's action).
    :param max_episode_length: Steps per episode.
    :param substeps: ``tanh`` updates per step: the knob for the simulated work per step.
    :param system_seed: Seed of ``W``, ``V`` and ``a_target``.
    :param validate_actions: Reject non-finite actions (on the CPU; see tasks.base.VecTask).
    """

    RECURRENT_NORM = 0.9  # spectral norm of W (< 1): the update is a contraction, so s settles for a held action
    TARGET_ACTION_RANGE = 0.5  # a_target is uniform in +-0.5, inside the action bounds

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        *,
        observation_size: int = 60,
        action_size: int = 8,
        max_episode_length: int = 1000,
        substeps: int = 4,
        system_seed: int = 0,
        validate_actions: bool = True,
    ) -> None:
        if substeps < 1:
            raise ValueError(f"substeps must be at least 1, got {substeps}")
        super().__init__(
            num_envs,
            device,
            seed,
            max_episode_length=max_episode_length,
            observation_size=observation_size,
            action_size=action_size,
            action_bound=1.0,
            validate_actions=validate_actions,
        )
        self.substeps = int(substeps)
        system = torch.Generator().manual_seed(system_seed)
        recurrent = torch.randn((observation_size, observation_size), generator=system)
        recurrent *= self.RECURRENT_NORM / torch.linalg.matrix_norm(recurrent, ord=2)
        action_input = torch.randn((action_size, observation_size), generator=system) / action_size**0.5
        target_action = self.TARGET_ACTION_RANGE * (2.0 * torch.rand(action_size, generator=system) - 1.0)
        target_state = torch.zeros(observation_size)
        for _ in range(200):  # contraction by 0.9 per iteration: converged to float precision
            target_state = torch.tanh(target_state @ recurrent + target_action @ action_input)
        self._recurrent = recurrent.to(self.device)
        self._action_input = action_input.to(self.device)
        self.target_action = target_action.to(self.device)
        self.target_state = target_state.to(self.device)

    def _sample_initial_state(self) -> torch.Tensor:
        unit = torch.rand((self.num_envs, self.observation_size), generator=self.generator, device=self.device)
        return 2.0 * unit - 1.0

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        actions = actions.clamp(-1.0, 1.0)
        drive = actions @ self._action_input
        state = self.state
        for _ in range(self.substeps):
            state = torch.tanh(state @ self._recurrent + drive)
        self.state = state
        reward = -(state - self.target_state).square().mean(-1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return reward, terminated

    def _observations(self) -> torch.Tensor:
        return self.state
