"""Test double of OIGE 4.0.0's ``tasks/base/rl_task.py`` ``RLTask``, with what the wrapper depends on:

- spaces from the old ``gym`` package (``from gym import spaces``), per env: ``observation_space``,
  ``action_space``, ``state_space``;
- buffers made once and written in place every step: ``obs_buf`` (N, obs), ``states_buf``, ``rew_buf`` (N,),
  ``reset_buf`` (N,) long, ``progress_buf`` (N,) long, and ``extras = {}``, which no task fills with
  ``time_outs``;
- ``reset()`` flags every env; ``pre_physics_step`` first resets the envs the previous step flagged
  (``reset_idx``: ``progress_buf`` zeroed), then takes the actions; ``post_physics_step`` does
  ``progress_buf += 1`` then observations, states, metrics and ``is_done``, returning
  ``(obs_buf, rew_buf, reset_buf, extras)``.

Dynamics: a point mass, x' = x + 0.1 v, v' = v + a; observations [x, v, progress, 1].
"""

import numpy as np
import torch
from gym import spaces


class RLTask:
    num_observations = 4
    num_actions = 1

    def __init__(self, name, sim_config, env, num_states=0):
        self.name, self._env, self._sim_config = name, env, sim_config
        self._cfg = sim_config.config
        self._task_cfg = sim_config.task_config
        self._num_envs = self._task_cfg["env"]["numEnvs"]
        self.num_states = num_states
        self.control_frequency_inv = self._task_cfg["env"].get("controlFrequencyInv", 1)
        self.clip_obs = self._task_cfg["env"].get("clipObservations", np.inf)
        self.clip_actions = self._task_cfg["env"].get("clipActions", 1.0)
        self.rl_device = self._cfg.get("rl_device", "cuda:0")
        self._device = "cpu" if self._cfg.get("pipeline") == "cpu" else self.rl_device
        self.action_space = spaces.Box(np.ones(self.num_actions) * -1.0, np.ones(self.num_actions) * 1.0)
        self.observation_space = spaces.Box(
            np.ones(self.num_observations) * -np.inf, np.ones(self.num_observations) * np.inf
        )
        self.state_space = spaces.Box(np.ones(self.num_states) * -np.inf, np.ones(self.num_states) * np.inf)
        self.generator = torch.Generator().manual_seed(self._cfg.get("seed", 0))
        self.position = torch.zeros(self._num_envs)
        self.velocity = torch.zeros(self._num_envs)
        self.reset_calls = 0
        self.cleanup()

    @property
    def num_envs(self):
        return self._num_envs

    def cleanup(self):
        n = self._num_envs
        self.obs_buf = torch.zeros((n, self.num_observations), dtype=torch.float)
        self.states_buf = torch.zeros((n, self.num_states), dtype=torch.float)
        self.rew_buf = torch.zeros(n, dtype=torch.float)
        self.reset_buf = torch.ones(n, dtype=torch.long)
        self.progress_buf = torch.zeros(n, dtype=torch.long)
        self.extras = {}

    def reset(self):
        self.reset_buf = torch.ones_like(self.reset_buf)

    def reset_idx(self, env_ids):
        self.reset_calls += 1
        self.position[env_ids] = 0.2 * (torch.rand(len(env_ids), generator=self.generator) - 0.5)
        self.velocity[env_ids] = 0.0
        self.reset_buf[env_ids] = 0
        self.progress_buf[env_ids] = 0

    def pre_physics_step(self, actions):
        env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.actions = actions.clone()

    def physics_step(self):
        self.position += 0.1 * self.velocity
        self.velocity += 0.5 * self.actions[:, 0]

    def post_physics_step(self):
        self.progress_buf[:] += 1
        self.get_observations()
        self.get_states()
        self.calculate_metrics()
        self.is_done()
        return self.obs_buf, self.rew_buf, self.reset_buf, self.extras

    def get_observations(self):
        self.obs_buf[:, 0] = self.position
        self.obs_buf[:, 1] = self.velocity
        self.obs_buf[:, 2] = self.progress_buf.float()
        self.obs_buf[:, 3] = 1.0
        return self.obs_buf

    def get_states(self):
        if self.num_states:
            self.states_buf[:, 0] = self.position
            self.states_buf[:, 1:] = 3.0
        return self.states_buf

    def calculate_metrics(self):
        self.rew_buf[:] = 1.0 - self.position**2
