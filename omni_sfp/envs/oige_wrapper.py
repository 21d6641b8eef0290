"""skrl 2 wrapper of OmniIsaacGymEnvs' ``VecEnvRLGames`` (skrl 2.0 removed its ``omniverse-isaacgym`` wrapper)."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from skrl import config
from skrl.envs.wrappers.torch.base import Wrapper
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space


class OmniIsaacGymWrapper(Wrapper):
    """Expose an OmniIsaacGymEnvs env to skrl 2: ``(obs, reward (N,1), terminated (N,1), truncated (N,1), info)``.

    The wrapped env speaks OmniIsaacGymEnvs 4.0.0's ``VecEnvRLGames`` protocol (over Isaac Sim's
    ``omni.isaac.gym.vec_env.VecEnvBase``):

    - ``num_envs``; ``observation_space``, ``action_space`` (per-env ``gym`` or ``gymnasium`` Boxes);
      ``num_states`` and ``state_space`` (a privileged critic state when ``num_states > 0``);
      ``_task.rl_device``, the device of every tensor it returns.
    - ``reset() -> {"obs": (N, obs), "states": (N, states)}``: flags every env for reset and takes one step.
    - ``step(actions) -> ({"obs", "states"}, rew (N,), resets (N,) long, extras)``; ``extras["time_outs"]``
      (optional, (N,)) marks the resets caused by the episode length limit. No OIGE 4.0.0 task sets it
      (``RLTask`` starts with ``extras = {}``): its tasks reset at ``progress_buf >= max_episode_length - 1``
      (most: tasks/shared/locomotion.py, ball_balance.py, franka_cabinet.py, quadcopter.py, ...), at
      ``>= max_episode_length`` (cartpole.py, target_following.py) or at ``> max_episode_length``
      (warp/cartpole.py), with ``_max_episode_length`` in most and ``max_episode_length`` in some; and
      ``progress_buf`` still holds the finished episode's length when ``step`` returns (it is zeroed in the
      next ``pre_physics_step``).

    Mapping: ``terminated = resets & ~time_outs``, ``truncated = resets & time_outs``, where ``time_outs`` is
    the task's ``extras["time_outs"]`` or, where absent, ``progress_buf >= threshold``. The threshold is the
    task's own: no episode outlives it, so it is the highest ``progress_buf`` seen at a reset, starting from
    ``max_episode_length - 1`` (the earliest any OIGE task times out) and starting over when the limit changes
    (a curriculum). Until a task's first time-out shows a higher threshold, a failure on the steps between
    counts as a time-out, as does one on the last step (the task's buffers cannot tell them apart); a task with
    neither only terminates. Resets are the env's own: a task resets the envs it flagged at the start of its next
    step, so the observation returned with a reset is the episode's last one (what skrl's
    ``time_limit_bootstrap`` needs) and this wrapper never calls ``reset()`` after the first. Tensors are
    copied out: OmniIsaacGymEnvs tasks write their buffers in place, and skrl (and the single-forward-pass
    cache's identity check) must not see a returned tensor change under them.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        task = getattr(env, "_task", None)
        if task is not None and hasattr(task, "rl_device"):
            self._device = config.torch.parse_device(task.rl_device)
        self._observation_space = _gymnasium_space(env.observation_space)
        self._action_space = _gymnasium_space(env.action_space)
        num_states = int(getattr(env, "num_states", 0) or 0)
        self._state_space = _gymnasium_space(env.state_space) if num_states > 0 else None
        self._reset_once = True
        self._closed = False
        self._observations: torch.Tensor | None = None
        self._states: torch.Tensor | None = None
        self._info: dict[str, Any] = {}
        self._time_out_at: tuple[float, torch.Tensor] | None = None  # (the task's limit, its time-out threshold)

    @property
    def observation_space(self) -> gymnasium.Space:
        return self._observation_space

    @property
    def action_space(self) -> gymnasium.Space:
        return self._action_space

    @property
    def state_space(self) -> gymnasium.Space | None:
        return self._state_space

    def reset(self) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env the first time; afterwards return the latest observations (the env auto-resets)."""
        if self._reset_once:
            self._take(self._env.reset())
            self._reset_once = False
        return self._observations, self._info

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        obs_dict, rewards, resets, extras = self._env.step(actions)
        self._take(obs_dict)
        # OmniIsaacGymEnvs resets in the next step's pre_physics_step: these observations are the episodes' final
        # ones, what the time-limit bootstrap needs (omni_sfp.ppo.agent.final_observations)
        self._info = {**(extras or {}), "final_observations": self._observations}
        done = resets.view(-1, 1).to(torch.bool)
        time_outs = extras.get("time_outs") if isinstance(extras, dict) else None
        if time_outs is None:
            time_outs = self._time_outs(done.view(-1))
        if time_outs is None:
            truncated = torch.zeros_like(done)
        else:
            truncated = done & torch.as_tensor(time_outs).view(-1, 1).to(device=done.device, dtype=torch.bool)
        terminated = done & ~truncated
        return self._observations, rewards.view(-1, 1).clone(), terminated, truncated, self._info

    def state(self) -> torch.Tensor | None:
        return self._states

    def render(self, *args, **kwargs) -> None:
        """Isaac Sim renders inside ``step`` when not headless; nothing to do."""
        return

    def close(self) -> None:
        """Close the env, which closes Isaac Sim's SimulationApp (once: also registered at exit)."""
        if not self._closed:
            self._closed = True
            self._env.close()

    def _time_outs(self, resets: torch.Tensor) -> torch.Tensor | None:
        """``progress_buf >= threshold`` (the class docstring), or None when the task has no episode limit."""
        task = getattr(self._env, "_task", None)
        progress = getattr(task, "progress_buf", None)
        limit = getattr(task, "_max_episode_length", getattr(task, "max_episode_length", None))
        if progress is None or limit is None:
            return None
        if not isinstance(progress, torch.Tensor):  # OIGE's warp tasks keep a warp array
            import warp

            progress = warp.to_torch(progress)
        limit = float(limit)
        if self._time_out_at is None or self._time_out_at[0] != limit:
            self._time_out_at = (limit, torch.tensor(limit - 1, device=progress.device))
        at_reset = torch.where(resets.to(progress.device), progress, torch.zeros_like(progress)).max()
        threshold = torch.maximum(self._time_out_at[1], at_reset.to(self._time_out_at[1].dtype))  # no host sync
        self._time_out_at = (limit, threshold)
        return progress >= threshold

    def _take(self, obs_dict: dict[str, torch.Tensor]) -> None:
        """Copies, flat per env as skrl's own wrappers give them (its memory stores (N, size); a network
        unflattens them by the space: CartpoleCamera's (N, width, height, 3) images)."""
        self._observations = flatten_tensorized_space(tensorize_space(self._observation_space, obs_dict["obs"])).clone()
        states = obs_dict.get("states")
        if self._state_space is not None and states is not None:
            self._states = flatten_tensorized_space(tensorize_space(self._state_space, states)).clone()
        else:
            self._states = None


def _gymnasium_space(space: Any) -> gymnasium.Space:
    # OmniIsaacGymEnvs' RLTask builds its spaces with the old `gym` package
    if isinstance(space, gymnasium.Space):
        return space
    from skrl.utils.spaces.torch import convert_gym_space

    return convert_gym_space(space)
