"""Test double of OIGE 4.0.0's ``utils/config_utils/sim_config.py`` ``SimConfig``: keeps the resolved config dict
(``config``, ``task_config`` = ``config["task"]``) and returns the physics parameters ``initialize_task`` reads."""


class SimConfig:
    def __init__(self, config):
        self._config = config
        self._cfg = config.get("task", {})
        self._sim = self._cfg.get("sim", {})

    @property
    def config(self):
        return self._config

    @property
    def task_config(self):
        return self._cfg

    def get_physics_params(self):
        return {
            "dt": self._sim.get("dt", 1 / 60),
            "rendering_dt": self._sim.get("rendering_dt", self._sim.get("dt", 1 / 60)),
        }
