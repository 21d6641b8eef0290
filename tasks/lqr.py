"""An Ant-sized linear-quadratic regulator problem whose optimal return is known in closed form."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

from .base import VecTask


class LQR60x8(VecTask):
    """A 60-state, 8-input linear system to regulate: PPO's distance to a provable optimum.

    Not Ant: it only shares Ant's observation and action sizes, so a network sized for Ant trains on a problem
    where :meth:`optimal_return` says how far from optimal the policy is. Dynamics ``x' = A x + B u + w``
    with ``A`` a Gaussian matrix rescaled to ``spectral_radius`` and ``B`` Gaussian (both drawn from
    ``system_seed``, so every env seed sees the same system; the pair is controllable), ``w`` Gaussian process
    noise of std ``process_noise_std``. Observation: ``x`` (the full state). Action: ``u`` itself, an
    unbounded Box (the LQR optimum is linear in ``x`` and would be distorted by clipping). Reward:
    ``-(mean(x^2) + action_cost * mean(u^2))``, i.e. ``Q = I/60``, ``R = action_cost * I/8``. Initial state
    ``x0 ~ N(0, I)``; every episode lasts exactly ``max_episode_length`` steps, reported as a truncation by
    default: a policy that does not see time can at best play the stationary (infinite-horizon) LQR gain,
    which reaches :meth:`optimal_return` to within sampling error. ``horizon_is_terminal=True`` reports the
    horizon's end as terminated instead (the finite-horizon reading: no bootstrap past it).

    :param num_envs: Number of systems simulated together.
    :param device: Torch device of the state.
    :param seed: Seed of the task's generator (initial states and noise).
    :param max_episode_length: Steps per episode.
    :param spectral_radius: Largest eigenvalue modulus of ``A``; near 1 the uncontrolled state decays slowly.
    :param action_cost: Weight of the action term of the cost.
    :param process_noise_std: Std of the Gaussian noise added to the state each step (0: deterministic).
    :param system_seed: Seed of ``A`` and ``B``.
    :param validate_actions: Reject non-finite actions (on the CPU; see tasks.base.VecTask).
    :param horizon_is_terminal: Report the end of the horizon as terminated instead of truncated.
    """

    STATE_SIZE = 60
    INPUT_SIZE = 8

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        *,
        max_episode_length: int = 100,
        spectral_radius: float = 0.99,
        action_cost: float = 1.0,
        process_noise_std: float = 0.0,
        system_seed: int = 0,
        validate_actions: bool = True,
        horizon_is_terminal: bool = False,
    ) -> None:
        self.horizon_is_terminal = bool(horizon_is_terminal)
        super().__init__(
            num_envs,
            device,
            seed,
            max_episode_length=max_episode_length,
            observation_size=self.STATE_SIZE,
            action_size=self.INPUT_SIZE,
            action_bound=np.inf,
            validate_actions=validate_actions,
        )
        if action_cost <= 0:
            raise ValueError(f"action_cost must be positive (the LQR needs R > 0), got {action_cost}")
        self.process_noise_std = float(process_noise_std)

        rng = np.random.default_rng(system_seed)
        a = rng.standard_normal((self.STATE_SIZE, self.STATE_SIZE)) / np.sqrt(self.STATE_SIZE)
        self.A = a * (spectral_radius / np.max(np.abs(np.linalg.eigvals(a))))
        self.B = rng.standard_normal((self.STATE_SIZE, self.INPUT_SIZE)) / np.sqrt(self.STATE_SIZE)
        self.Q = np.eye(self.STATE_SIZE) / self.STATE_SIZE
        self.R = action_cost * np.eye(self.INPUT_SIZE) / self.INPUT_SIZE
        # float64 numpy copies above for the Riccati maths; float32 device copies below for the step
        self._A_t = torch.tensor(self.A.T, dtype=torch.float32, device=self.device)
        self._B_t = torch.tensor(self.B.T, dtype=torch.float32, device=self.device)
        self._action_cost = float(action_cost)

        riccati = scipy.linalg.solve_discrete_are(self.A, self.B, self.Q, self.R)
        gain = np.linalg.solve(self.R + self.B.T @ riccati @ self.B, self.B.T @ riccati @ self.A)
        self._neg_gain_t = torch.tensor(-gain.T, dtype=torch.float32, device=self.device)

    def step(self, actions: torch.Tensor):
        observations, rewards, terminated, truncated, info = super().step(actions)
        if self.horizon_is_terminal:
            return observations, rewards, terminated | truncated, torch.zeros_like(truncated), info
        return observations, rewards, terminated, truncated, info

    def optimal_return(self) -> float:
        """Expected return of the best policy over one episode, from the finite-horizon Riccati recursion.

        With ``P_T = 0`` and ``P_t = Q + A'P_{t+1}A - A'P_{t+1}B (R + B'P_{t+1}B)^-1 B'P_{t+1}A``, the minimal
        expected cost is ``trace(P_0 Sigma_0) + sigma_w^2 sum_t trace(P_{t+1})`` with ``Sigma_0 = I``. It bounds
        every policy, including time-varying ones; the stationary :meth:`optimal_action` reaches it (its
        expected cost differs by <0.1 % at the default settings).
        """
        cost_to_go = np.zeros_like(self.Q)
        noise_cost = 0.0
        for _ in range(self.max_episode_length):
            noise_cost += self.process_noise_std**2 * np.trace(cost_to_go)
            gain = np.linalg.solve(self.R + self.B.T @ cost_to_go @ self.B, self.B.T @ cost_to_go @ self.A)
            cost_to_go = self.Q + self.A.T @ cost_to_go @ (self.A - self.B @ gain)
        return -float(np.trace(cost_to_go) + noise_cost)

    def optimal_action(self, observations: torch.Tensor) -> torch.Tensor:
        """The infinite-horizon LQR controller ``u = -K x`` (``K`` from the discrete algebraic Riccati equation).

        It is the best stationary policy of the observation alone, what a policy network can represent.
        """
        return observations @ self._neg_gain_t

    def _sample_initial_state(self) -> torch.Tensor:
        return torch.randn((self.num_envs, self.STATE_SIZE), generator=self.generator, device=self.device)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.state
        reward = -(x.square().mean(-1) + self._action_cost * actions.square().mean(-1))
        next_x = x @ self._A_t + actions @ self._B_t
        if self.process_noise_std > 0:
            noise = torch.randn(next_x.shape, generator=self.generator, device=self.device)
            next_x = next_x + self.process_noise_std * noise
        self.state = next_x
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return reward, terminated

    def _observations(self) -> torch.Tensor:
        return self.state
