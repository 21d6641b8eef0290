"""Cart-pole balancing, batched on the device, with OmniIsaacGymEnvs' Cartpole observations and reward."""

from __future__ import annotations

import math

import numpy as np
import torch

from .base import VecTask


class Cartpole(VecTask):
    """Keep a pole upright on a cart: the quick learnability check of the SFP trainer, no simulator needed.

    The dynamics are the classic cart-pole equations (Barto, Sutton & Anderson 1983; a uniform rod on a
    frictionless cart) integrated with semi-implicit Euler at ``SIM_DT`` = 1/60 s, ``SUBSTEPS`` = 2 per
    control step (30 Hz control: OmniIsaacGymEnvs' ``controlFrequencyInv``, but twice its ``dt`` of 1/120 s, so
    an episode lasts twice as long in seconds; docs/dev/benchmark-log.md, "Learning quality"). Observation: cart position (m),
    cart velocity (m/s), pole angle (rad, 0 upright, positive leaning towards +x) and pole angular velocity
    (rad/s). Action: one force in [-1, 1] (clipped) times ``max_effort``. Reward, as OmniIsaacGymEnvs'
    Cartpole: ``1 - angle^2 - 0.01 |cart_vel| - 0.005 |pole_vel|``, or -2 on the step that terminates the
    episode (the cart beyond ``reset_dist`` or the pole past horizontal). Initial states are OmniIsaacGymEnvs'
    reset: cart position in +-1 m, pole angle in +-pi/8, both velocities in +-0.5, uniform.

    :param num_envs: Number of cart-poles.
    :param device: Torch device of the state.
    :param seed: Seed of the task's generator.
    :param max_episode_length: Control steps before truncation (500, ~16.7 s).
    :param reset_dist: Cart distance from the origin (m) that terminates an episode.
    :param max_effort: Force (N) applied by an action of 1; 10 N accelerates the 1.1 kg cart-pole at
        ~9 m/s^2, enough to catch the pole from any initial state.
    :param sim_dt: Physics substep (s); ``SUBSTEPS`` of them make a control step. 1/120 is OmniIsaacGymEnvs'.
    :param validate_actions: Reject non-finite actions (on the CPU; see tasks.base.VecTask).
    """

    GRAVITY = 9.81  # m/s^2
    CART_MASS = 1.0  # kg
    POLE_MASS = 0.1  # kg
    POLE_HALF_LENGTH = 0.5  # m, pivot to the pole's centre of mass
    SIM_DT = 1.0 / 60.0  # s per physics substep
    SUBSTEPS = 2  # physics substeps per control step
    TERMINATION_REWARD = -2.0
    INITIAL_RANGES = (1.0, 0.5, math.pi / 8, 0.5)  # half-widths of the uniform initial state
    # Gymnasium's convention, read by the video recorder: one frame per control step (SIM_DT * SUBSTEPS = 1/30 s)
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    OBSERVED: tuple[int, ...] | None = None  # the state's components observed (None: all four)

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        *,
        max_episode_length: int = 500,
        reset_dist: float = 3.0,
        max_effort: float = 10.0,
        sim_dt: float = SIM_DT,
        validate_actions: bool = True,
    ) -> None:
        if not sim_dt > 0:
            raise ValueError(f"sim_dt={sim_dt!r}: must be > 0")
        self.sim_dt = float(sim_dt)
        # Gymnasium's convention, read by the video recorder: one frame per control step
        self.metadata = {**self.metadata, "render_fps": 1.0 / (self.sim_dt * self.SUBSTEPS)}
        self.reset_dist = float(reset_dist)
        self.max_effort = float(max_effort)
        self._initial_ranges = torch.tensor(self.INITIAL_RANGES, device=device)
        super().__init__(
            num_envs,
            device,
            seed,
            max_episode_length=max_episode_length,
            observation_size=4 if self.OBSERVED is None else len(self.OBSERVED),
            action_size=1,
            action_bound=1.0,
            validate_actions=validate_actions,
        )

    @property
    def max_episode_return(self) -> float:
        """Upper bound of an episode's return (reward 1 per step); trained policies get ~498 from random starts."""
        return float(self.max_episode_length)

    def _sample_initial_state(self) -> torch.Tensor:
        unit = torch.rand((self.num_envs, 4), generator=self.generator, device=self.device)
        return (2.0 * unit - 1.0) * self._initial_ranges

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        force = self.max_effort * actions[:, 0].clamp(-1.0, 1.0)
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        for _ in range(self.SUBSTEPS):
            x_acc, theta_acc = self._accelerations(theta, theta_dot, force)
            x_dot = x_dot + self.sim_dt * x_acc
            theta_dot = theta_dot + self.sim_dt * theta_acc
            x = x + self.sim_dt * x_dot
            theta = theta + self.sim_dt * theta_dot
        self.state = torch.stack((x, x_dot, theta, theta_dot), dim=-1)

        terminated = (x.abs() > self.reset_dist) | (theta.abs() > math.pi / 2)
        reward = 1.0 - theta.square() - 0.01 * x_dot.abs() - 0.005 * theta_dot.abs()
        reward = torch.where(terminated, self.TERMINATION_REWARD, reward)
        return reward, terminated

    def _accelerations(
        self, theta: torch.Tensor, theta_dot: torch.Tensor, force: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cart and pole accelerations of the classic equations for a force (N) on the cart."""
        total_mass = self.CART_MASS + self.POLE_MASS
        sin, cos = theta.sin(), theta.cos()
        pole_moment = self.POLE_MASS * self.POLE_HALF_LENGTH
        temp = (force + pole_moment * theta_dot.square() * sin) / total_mass
        theta_acc = (self.GRAVITY * sin - cos * temp) / (
            self.POLE_HALF_LENGTH * (4.0 / 3.0 - self.POLE_MASS * cos.square() / total_mass)
        )
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        return x_acc, theta_acc

    def _observations(self) -> torch.Tensor:
        return self.state if self.OBSERVED is None else self.state[:, list(self.OBSERVED)]

    def render(self, env_index: int = 0, *, width: int = 480, height: int = 240) -> np.ndarray:
        """One ``rgb_array`` frame of environment ``env_index``: track, the ``reset_dist`` limits (red), cart and
        pole, drawn with numpy into a ``(height, width, 3)`` uint8 array. The state is read from the device only
        here, so a run that does not record never synchronises for it.
        """
        if not 0 <= env_index < self.num_envs:
            raise ValueError(f"env_index={env_index}: this task has {self.num_envs} environments")
        x, _, theta, _ = self.state[env_index].tolist()
        span = self.reset_dist + 0.6  # metres shown either side of the origin
        scale = width / (2 * span)  # pixels per metre
        to_col = lambda metres: (metres + span) * scale  # noqa: E731
        ground = int(0.75 * height)  # row of the track
        frame = np.full((height, width, 3), 245, dtype=np.uint8)
        frame[ground : ground + 2, :] = (120, 120, 120)
        for limit in (-self.reset_dist, self.reset_dist):
            col = int(to_col(limit))
            frame[ground - int(0.15 * scale) : ground + 2, max(0, col - 1) : col + 2] = (200, 40, 40)
        cart_col, cart_top = to_col(x), ground - 0.25 * scale
        half_w = 0.25 * scale
        frame[int(cart_top) : ground, max(0, int(cart_col - half_w)) : max(0, int(cart_col + half_w) + 1)] = (
            40,
            70,
            160,
        )
        # the pole: a segment from the pivot (top centre of the cart), angle 0 upright, positive towards +x; only
        # the pixels of its bounding box are tested
        length, thickness = 2 * self.POLE_HALF_LENGTH * scale, max(2.0, 0.03 * scale)
        base = np.array([cart_col, cart_top])
        direction = np.array([length * math.sin(theta), -length * math.cos(theta)])
        lo = np.floor(np.minimum(base, base + direction) - thickness).astype(int)
        hi = np.ceil(np.maximum(base, base + direction) + thickness).astype(int)
        c0, c1 = max(lo[0], 0), min(hi[0], width)
        r0, r1 = max(lo[1], 0), min(hi[1], height)
        if c0 < c1 and r0 < r1:
            cols = np.arange(c0, c1, dtype=np.float32)[None, :] - base[0]
            rows = np.arange(r0, r1, dtype=np.float32)[:, None] - base[1]
            along = np.clip((cols * direction[0] + rows * direction[1]) / (direction @ direction), 0.0, 1.0)
            near = np.hypot(cols - along * direction[0], rows - along * direction[1]) <= thickness
            frame[r0:r1, c0:c1][near] = (230, 140, 30)
        return frame


class CartpolePositions(Cartpole):
    """:class:`Cartpole` observed through its positions only: cart position (m) and pole angle (rad), no velocity.

    A partially observed task: one observation says where the pole is, not where it is going, so a policy that
    sees one step cannot tell a pole falling left from one recovering, and cannot balance it for long; a recurrent
    policy can estimate the velocities from the steps it has seen. Everything else (dynamics, reward, resets,
    episode length) is :class:`Cartpole`'s."""

    OBSERVED = (0, 2)
