"""Test double of OIGE 4.0.0's Factory tasks (``tasks/factory/factory_base.py``, ``factory_task_nut_bolt_pick.py``):
the constructor stores its schema in Hydra's ConfigStore and calls ``hydra.compose(config_name=
"task/FactoryBase.yaml")`` itself, which works only while Hydra's global state is initialised on OIGE's ``cfg/``
(as ``@hydra.main`` in ``rlgames_train.py`` leaves it). ``max_episode_length`` (no underscore) comes from
``rl.max_episode_length``; ``is_done`` resets at ``progress_buf >= max_episode_length - 1``."""

from dataclasses import dataclass, field

import hydra
import torch
from hydra.core.config_store import ConfigStore

from omniisaacgymenvs.tasks.base import RLTask


@dataclass
class FactorySchemaConfigBase:
    mode: dict = field(default_factory=lambda: {"export_scene": False})


class FactoryTaskNutBoltPick(RLTask):
    def __init__(self, name, sim_config, env, offset=None):
        super().__init__(name, sim_config, env)
        ConfigStore.instance().store(name="factory_schema_config_base", node=FactorySchemaConfigBase)
        self.cfg_base = hydra.compose(config_name="task/FactoryBase.yaml")["task"]
        self.max_episode_length = self._task_cfg["rl"]["max_episode_length"]

    def is_done(self):
        self.reset_buf[:] = torch.where(
            self.progress_buf[:] >= self.max_episode_length - 1, torch.ones_like(self.reset_buf), self.reset_buf
        )
