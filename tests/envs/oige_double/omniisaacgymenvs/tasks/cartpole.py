"""Test doubles of OIGE 4.0.0's ``tasks/cartpole.py`` / ``tasks/cartpole_camera.py``: ``_max_episode_length``
(upstream: 500; here ``env.episodeLength``, default 5, to keep tests short) and ``is_done`` as upstream's
Cartpole: a failure (|x| > ``env.resetDist``) or ``progress_buf >= _max_episode_length`` resets; no
``extras["time_outs"]``."""

import torch

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
    """Upstream reads ``cameraWidth`` / ``cameraHeight`` and needs ``sim.enable_cameras`` (its YAML sets it)."""

    def __init__(self, name, sim_config, env, offset=None):
        super().__init__(name, sim_config, env, offset)
        self.camera_width = self._task_cfg["env"]["cameraWidth"]
        self.camera_height = self._task_cfg["env"]["cameraHeight"]
        assert self._task_cfg["sim"]["enable_cameras"], "CartpoleCamera needs sim.enable_cameras"
