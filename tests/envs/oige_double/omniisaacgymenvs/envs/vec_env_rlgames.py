"""Test double of OIGE 4.0.0's ``envs/vec_env_rlgames.py`` ``VecEnvRLGames`` over Isaac Sim 4.0's
``omni.isaac.gym.vec_env.VecEnvBase`` (a ``gymnasium.Env``), minus Isaac Sim:

- the constructor starts the app, as ``VecEnvBase`` does with ``SimulationApp({"headless": headless,
  "physics_gpu": sim_device}, experience=experience)``; Kit's settings take plain values only, so a
  ``sim_device`` that is not an ``int`` (e.g. a ``torch.device``) raises ``TypeError``. Every start is recorded
  in ``LAUNCHES`` (headless, physics_gpu, experience, enable_viewport) and only one app may live per process;
- ``set_task(task, backend, sim_params, init_sim, rendering_dt)`` stores the task and copies
  ``observation_space`` / ``action_space`` / ``num_states`` / ``state_space``;
- ``step(actions)``: clamp to ``clip_actions``, ``task.pre_physics_step``, ``control_frequency_inv`` world steps,
  ``task.post_physics_step()``, ``task.get_states()``, then ``_process_data`` (obs and states clamped to
  ``clip_obs``: new tensors; rewards, resets and extras passed as the task's own objects);
- ``reset()``: ``task.reset()`` then ``step(zeros)``; ``close()`` closes the app (recorded in ``closed``).
"""

import gymnasium
import torch

LAUNCHES = []


class VecEnvRLGames(gymnasium.Env):
    def __init__(
        self,
        headless,
        sim_device=0,
        enable_livestream=False,
        enable_viewport=False,
        launch_simulation_app=True,
        experience=None,
    ):
        if not isinstance(sim_device, int) or isinstance(sim_device, bool):
            raise TypeError(f"SimulationApp: physics_gpu must be an int, got {type(sim_device).__name__}")
        if any(not launch["closed"] for launch in LAUNCHES):
            raise RuntimeError("a SimulationApp is already running in this process")
        self._launch = {
            "headless": headless,
            "physics_gpu": sim_device,
            "experience": experience,
            "enable_viewport": enable_viewport,
            "closed": False,
        }
        LAUNCHES.append(self._launch)
        self._render = not headless or enable_livestream or enable_viewport
        self._task = None
        self.sim_frame_count = 0
        self.reset_calls = self.step_calls = 0

    @property
    def closed(self):
        return self._launch["closed"]

    def set_task(self, task, backend="numpy", sim_params=None, init_sim=True, rendering_dt=1.0 / 60.0):
        self._task = task
        self._num_envs = task.num_envs
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self.num_states = task.num_states
        self.state_space = task.state_space
        self.backend, self.sim_params = backend, sim_params

    @property
    def num_envs(self):
        return self._num_envs

    def step(self, actions):
        self.step_calls += 1
        task = self._task
        actions = torch.clamp(actions, -task.clip_actions, task.clip_actions).to(task._device)
        task.pre_physics_step(actions)
        for _ in range(task.control_frequency_inv):
            task.physics_step()
            self.sim_frame_count += 1
        obs, rew, resets, extras = task.post_physics_step()
        states = task.get_states()
        obs = torch.clamp(obs, -task.clip_obs, task.clip_obs).to(task.rl_device)
        states = torch.clamp(states, -task.clip_obs, task.clip_obs).to(task.rl_device)
        return {"obs": obs, "states": states}, rew.to(task.rl_device), resets.to(task.rl_device), extras

    def reset(self, seed=None, options=None):
        self.reset_calls += 1
        self._task.reset()
        actions = torch.zeros((self.num_envs, self._task.num_actions), device=self._task.rl_device)
        obs_dict, _, _, _ = self.step(actions)
        return obs_dict

    def render(self, mode="human"):
        raise AssertionError("the wrapper must not render: Isaac Sim renders inside step")

    def close(self):
        self._launch["closed"] = True
