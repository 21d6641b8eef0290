"""Test doubles of OIGE 4.0.0's ``tasks/cartpole.py`` / ``tasks/cartpole_camera.py``: ``_max_episode_length``
(upstream: 500; here ``env.episodeLength``, default 5, to keep tests short) and ``is_done`` as upstream's
Cartpole: a failure (|x| > ``env.resetDist``) or ``progress_buf >= _max_episode_length`` resets; no
``extras["time_outs"]``. CartpoleCamera's observations are upstream's: RGB images as
``(N, cameraWidth, cameraHeight, 3)`` floats in [0, 1] (``swapaxes(images, 1, 3) / 255`` of the render products'
NCHW), in an unbounded ``Box`` of that per-env shape."""

import numpy as np
import torch
from gym import spaces

from omniisaacgymenvs.tasks.base import RLTask


class CartpoleTask(RLTask):
    def __init__(self, name, sim_config, env, offset=None):
        super().__init__(name, sim_config, env, num_states=sim_config.task_config["env"].get("numStates", 0))
        self._reset_dist = self._task_cfg["env"].get("resetDist", 3.0)
        self._max_episode_length = self._task_cfg["env"].get("episodeLength", 5)

    def is_done(self):
        resets = torch.where(self.position.abs() > self._reset_dist, 1, 0)
        resets = torch.where(self.progress_buf >= self._max_episode_length, 1, resets)
        self.reset_buf[:] = resets


class CartpoleCameraTask(CartpoleTask):
    """Upstream reads ``cameraWidth`` / ``cameraHeight`` and needs ``sim.enable_cameras`` (its YAML sets it).
    The picture: the cart, a lit column at its position in the red channel, on a dim background."""

    def __init__(self, name, sim_config, env, offset=None):
        self.camera_width = sim_config.task_config["env"]["cameraWidth"]
        self.camera_height = sim_config.task_config["env"]["cameraHeight"]
        super().__init__(name, sim_config, env, offset)
        assert self._task_cfg["sim"]["enable_cameras"], "CartpoleCamera needs sim.enable_cameras"
        shape = (self.camera_width, self.camera_height, 3)
        self.observation_space = spaces.Box(np.ones(shape) * -np.inf, np.ones(shape) * np.inf)

    def cleanup(self):
        super().cleanup()
        self.obs_buf = torch.zeros((self._num_envs, self.camera_width, self.camera_height, 3), dtype=torch.float)

    def get_observations(self):
        fraction = ((self.position + self._reset_dist) / (2 * self._reset_dist)).clamp(0, 1)
        column = (fraction * (self.camera_width - 1)).round().long()
        self.obs_buf[:] = 0.1
        self.obs_buf[torch.arange(self._num_envs), column, :, 0] = 1.0
        return self.obs_buf
