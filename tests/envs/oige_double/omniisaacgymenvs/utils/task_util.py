"""Test double of OIGE 4.0.0's ``utils/task_util.py``: ``import_tasks()`` returns ``(task_map, task_map_warp)``;
``initialize_task(config, env)`` builds ``SimConfig(config)``, instantiates ``task_map[config["task_name"]](name=...,
sim_config=..., env=env)`` and calls ``env.set_task(task=..., sim_params=..., backend="torch", init_sim=True,
rendering_dt=...)``."""


def import_tasks():
    from omniisaacgymenvs.tasks.cartpole import CartpoleCameraTask, CartpoleTask
    from omniisaacgymenvs.tasks.factory import FactoryTaskNutBoltPick
    from omniisaacgymenvs.tasks.shadow_hand import ShadowHandTask

    task_map = {
        "Ant": CartpoleTask,  # the dynamics do not matter here: Ant's config is what the tests read
        "Cartpole": CartpoleTask,
        "CartpoleCamera": CartpoleCameraTask,
        "FactoryTaskNutBoltPick": FactoryTaskNutBoltPick,
        "ShadowHand": ShadowHandTask,  # task/ShadowHandOpenAI_FF.yaml's name
    }
    return task_map, {"Cartpole": CartpoleTask}


def initialize_task(config, env, init_sim=True):
    from omniisaacgymenvs.utils.config_utils.sim_config import SimConfig

    sim_config = SimConfig(config)
    task_map, task_map_warp = import_tasks()
    cfg = sim_config.config
    if cfg["warp"]:
        task_map = task_map_warp
    task = task_map[cfg["task_name"]](name=cfg["task_name"], sim_config=sim_config, env=env)
    backend = "warp" if cfg["warp"] else "torch"
    rendering_dt = sim_config.get_physics_params()["rendering_dt"]
    env.set_task(
        task=task,
        sim_params=sim_config.get_physics_params(),
        backend=backend,
        init_sim=init_sim,
        rendering_dt=rendering_dt,
    )
    return task
