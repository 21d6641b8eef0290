"""Isaac Lab tasks (Gymnasium ids ``Isaac-...``) for omni_sfp: registration and launch.

Targets Isaac Lab 3 (PyPI ``isaaclab`` 3.0.0, Python 3.12). Importing this module is light (no torch, no
Isaac Sim); :func:`make_isaaclab_env` starts Isaac Sim through Isaac Lab's ``AppLauncher`` *first*, as Isaac
Lab's ``scripts/reinforcement_learning/skrl/train.py`` does, then imports ``isaaclab_tasks`` (which registers
the ids), builds the env from its registered config and wraps it with skrl's ``isaaclab`` wrapper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skrl.envs.wrappers.torch import Wrapper

PREFIX = "Isaac-"
ENTRY_POINT = "omni_sfp.envs.isaaclab:make_isaaclab_env"


class IsaacLabError(RuntimeError):
    """Isaac Lab is missing, or has no such task; the message says what to do."""


def registered_ids() -> list[str]:
    """The ``Isaac-...`` ids in Gymnasium's registry now (Isaac Lab's ``isaaclab_tasks`` adds them on import)."""
    import gymnasium

    return sorted(task_id for task_id in gymnasium.registry if task_id.startswith(PREFIX))


def register_isaaclab_tasks(ids: list[str] | None = None) -> list[str]:
    """Register Isaac Lab ids (kind ``"isaaclab"``) in omni_sfp's registry; returns the names registered.

    Only ids already in Gymnasium's registry are listed (``isaaclab_tasks`` registers them when imported,
    which needs a running Isaac Sim: inside Isaac Sim with Isaac Lab's extensions enabled they are there).
    Before Isaac Sim starts, pass the ids you want (``ids=[...]``).
    """
    from omni_sfp import registry

    names = registered_ids() if ids is None else list(ids)
    for task_id in names:
        if not task_id.startswith(PREFIX):
            raise ValueError(f"task {task_id!r}: Isaac Lab ids start with {PREFIX!r}")
        registry.register_task(registry.TaskSpec(task_id, "isaaclab", ENTRY_POINT, f"Isaac Lab {task_id}"))
    return names


def make_isaaclab_env(
    name: str,
    *,
    num_envs: int,
    device: str,
    seed: int,
    headless: bool = True,
    task_cfg: Mapping[str, Any] | None = None,
) -> Wrapper:
    """Start Isaac Sim (``AppLauncher``), build Isaac Lab env ``name`` and wrap it for skrl 2.

    :param task_cfg: attribute overrides applied to the env config (``{"episode_length_s": 10.0}``; dotted
        keys reach nested configs: ``{"scene.env_spacing": 3.0}``).
    :raises IsaacLabError: Isaac Lab missing or unknown id.
    """
    try:
        from isaaclab.app import AppLauncher
    except ImportError as error:
        raise IsaacLabError(f"task {name!r} needs Isaac Lab (pip install isaaclab[isaacsim]): {error}") from None

    if device == "auto":
        import torch

        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    elif device == "cuda":
        device = "cuda:0"
    # 1. Isaac Sim first.
    app_launcher = AppLauncher(headless=headless, device=device)
    # 2. Now Isaac Lab's tasks (they import omni.* modules) and skrl.
    import gymnasium
    import isaaclab_tasks  # noqa: F401  (registers the Isaac-... ids)
    from isaaclab_tasks.utils import parse_env_cfg
    from skrl.envs.wrappers.torch import wrap_env

    if name not in gymnasium.registry:
        app_launcher.app.close()
        raise IsaacLabError(f"Isaac Lab has no task {name!r}; its tasks: {', '.join(registered_ids())}")
    env_cfg = parse_env_cfg(name, device=device, num_envs=num_envs)
    env_cfg.seed = seed
    for key, value in (task_cfg or {}).items():
        target = env_cfg
        *parents, leaf = key.split(".")
        for parent in parents:
            target = getattr(target, parent)
        if not hasattr(target, leaf):
            app_launcher.app.close()
            raise IsaacLabError(f"task_cfg key {key!r}: the env config of {name!r} has no such field")
        setattr(target, leaf, value)
    env = gymnasium.make(name, cfg=env_cfg)
    return wrap_env(env, wrapper="isaaclab")
