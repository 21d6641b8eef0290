"""OmniIsaacGymEnvs tasks for omni_sfp: registration, Isaac Sim launch, and the skrl 2 wrapper.

Targets OmniIsaacGymEnvs 4.0.0 (its final release) on Isaac Sim 4.0 (Python 3.10), run with Isaac Sim's
``python.sh``. Importing this module is light: it reads OmniIsaacGymEnvs' files but imports nothing from it
(nor torch), so the registry, the Kit extension and ``python.sh -m omni_sfp.train task=Ant`` can list and
validate the tasks before Isaac Sim starts. :func:`make_oige_env` then starts Isaac Sim *first*, as
OmniIsaacGymEnvs' ``scripts/rlgames_train.py`` does, and only then imports the task classes.

The skrl wrapper is :class:`omni_sfp.envs.oige_wrapper.OmniIsaacGymWrapper` (it needs torch and skrl; it is
also reachable as ``omni_sfp.envs.oige.OmniIsaacGymWrapper``).
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

PREFIX = "OIGE-"  # registry name of an OmniIsaacGymEnvs task whose plain name an embedded task already holds
ENTRY_POINT = "omni_sfp.envs.oige:make_oige_env"
KIT_APP = Path(__file__).resolve().parents[2] / "config" / "omni.sfp.train.kit"


class OIGEError(RuntimeError):
    """OmniIsaacGymEnvs is missing, or has no such task; the message says what to do."""


def package_dir() -> Path | None:
    """The installed ``omniisaacgymenvs`` package folder, found without importing it; None if not installed."""
    try:
        spec = importlib.util.find_spec("omniisaacgymenvs")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def task_names(package: Path | None = None) -> list[str]:
    """OmniIsaacGymEnvs' task names: those with ``cfg/task/<Name>.yaml`` and ``cfg/train/<Name>PPO.yaml``.

    These are exactly the keys of its ``utils.task_util.import_tasks()`` task map (its Hydra config picks
    ``train: ${task}PPO``, so a task without a PPO config cannot run), read without importing the task
    modules, which need a running Isaac Sim.
    """
    package = package or package_dir()
    if package is None:
        return []
    tasks = {p.stem for p in (package / "cfg" / "task").glob("*.yaml")}
    trains = {p.name[: -len("PPO.yaml")] for p in (package / "cfg" / "train").glob("*PPO.yaml")}
    return sorted(tasks & trains)


def register_oige_tasks(package: Path | None = None) -> list[str]:
    """Register every OmniIsaacGymEnvs task in omni_sfp's registry (kind ``"oige"``); returns the names used.

    A task keeps its OmniIsaacGymEnvs name (``task=Ant``) unless another kind holds it (the embedded
    ``Cartpole``): then it is registered as ``OIGE-<Name>``. Registering twice is a no-op.
    """
    from omni_sfp import registry

    package = package or package_dir()
    if package is None:
        return []
    taken = set(registry.list_tasks()) - set(registry.list_tasks("oige"))
    names = []
    for task in task_names(package):
        name = task if task not in taken else PREFIX + task
        description = f"OmniIsaacGymEnvs {task} (Isaac Sim, PhysX)"
        registry.register_task(registry.TaskSpec(name, "oige", ENTRY_POINT, description))
        names.append(name)
    return names


def devices(device: str, cuda_available: bool) -> dict[str, Any]:
    """OmniIsaacGymEnvs' device keys for omni_sfp's ``device`` (auto | cpu | cuda | cuda:N)."""
    if device == "auto":
        device = "cuda:0" if cuda_available else "cpu"
    if device == "cpu":
        return {"pipeline": "cpu", "sim_device": "cpu", "device_id": 0, "rl_device": "cpu"}
    if device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda:") and device[5:].isdigit():
        return {"pipeline": "gpu", "sim_device": "gpu", "device_id": int(device[5:]), "rl_device": device}
    raise OIGEError(f"device={device!r} is not allowed for OmniIsaacGymEnvs: expected auto, cpu, cuda or cuda:N")


def _register_resolvers() -> None:
    # The resolvers OmniIsaacGymEnvs' YAML files use, with its semantics (utils/hydra_cfg/hydra_utils.py);
    # registered here so composing its config needs no OmniIsaacGymEnvs import.
    from omegaconf import OmegaConf

    resolvers = {
        "eq": lambda x, y: x.lower() == y.lower(),
        "contains": lambda x, y: x.lower() in y.lower(),
        "if": lambda pred, a, b: a if pred else b,
        "resolve_default": lambda default, arg: default if arg == "" else arg,
    }
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def oige_config(
    task: str,
    *,
    num_envs: int,
    seed: int,
    headless: bool,
    device_keys: Mapping[str, Any],
    task_cfg: Mapping[str, Any] | None = None,
    package: Path | None = None,
) -> dict[str, Any]:
    """The resolved config dict OmniIsaacGymEnvs' ``initialize_task`` takes, composed from its own YAML files.

    The same result as its ``rlgames_train.py`` (``cfg/config.yaml`` with ``task=<task>`` and the given
    ``num_envs``, ``seed``, ``headless`` and devices), without Hydra's global state, which omni_sfp's runner
    already uses. ``task_cfg`` is merged into the ``task`` section (e.g. ``{"env": {"envSpacing": 2.0}}``).
    """
    from omegaconf import OmegaConf

    package = package or package_dir()
    if package is None:
        raise OIGEError("OmniIsaacGymEnvs is not installed: `python.sh -m pip install -e OmniIsaacGymEnvs`")
    cfg_dir = package / "cfg"
    if task not in task_names(package):
        raise OIGEError(f"OmniIsaacGymEnvs has no task {task!r}; its tasks: {', '.join(task_names(package))}")
    _register_resolvers()
    root = OmegaConf.load(cfg_dir / "config.yaml")
    for key in ("defaults", "hydra"):
        root.pop(key, None)
    root.task = OmegaConf.load(cfg_dir / "task" / f"{task}.yaml")
    root.train = OmegaConf.load(cfg_dir / "train" / f"{task}PPO.yaml")
    root.merge_with({"num_envs": num_envs, "seed": seed, "headless": headless, "test": False, **device_keys})
    if task_cfg:
        root.task = OmegaConf.merge(root.task, OmegaConf.create(dict(task_cfg)))
    resolved = OmegaConf.to_container(root, resolve=True)
    assert isinstance(resolved, dict)
    return copy.deepcopy(resolved)


def default_experience(headless: bool) -> str | None:
    """omni_sfp's ``config/omni.sfp.train.kit`` when it can load (headless, in a checkout named ``omni.sfp``,
    the extension id); otherwise None, so Isaac Sim's VecEnvBase picks its own gym experience."""
    checkout = KIT_APP.parent.parent
    if headless and KIT_APP.is_file() and checkout.name == "omni.sfp":
        return str(KIT_APP)
    return None


def make_oige_env(
    name: str,
    *,
    num_envs: int,
    device: str,
    seed: int,
    headless: bool = True,
    task_cfg: Mapping[str, Any] | None = None,
    experience: str | None = None,
) -> OmniIsaacGymWrapper:
    """Start Isaac Sim, build OmniIsaacGymEnvs task ``name`` and wrap it for skrl 2.

    Isaac Sim starts before anything else from Omniverse is imported: VecEnvRLGames' constructor creates the
    ``SimulationApp``; only afterwards are ``omni.isaac.core`` and the task modules imported. Run it with
    Isaac Sim's ``python.sh``. The process owns one SimulationApp: build one OmniIsaacGymEnvs env per process.

    :param name: registry name (``Ant`` or ``OIGE-Cartpole``).
    :param experience: Kit app file; default :func:`default_experience`.
    :raises OIGEError: OmniIsaacGymEnvs missing, unknown task or device.
    """
    import torch

    task = name.removeprefix(PREFIX)
    package = package_dir()
    keys = devices(str(device), torch.cuda.is_available())
    cfg = oige_config(
        task, num_envs=num_envs, seed=seed, headless=headless, device_keys=keys, task_cfg=task_cfg, package=package
    )

    # 1. Isaac Sim (SimulationApp) first.
    from omniisaacgymenvs.envs.vec_env_rlgames import VecEnvRLGames

    env = VecEnvRLGames(
        headless=headless,
        sim_device=keys["device_id"],
        enable_livestream=False,
        enable_viewport=False,
        experience=experience or default_experience(headless),
    )
    # 2. Now omni.isaac.core and the task classes can be imported.
    from omni.isaac.core.utils.torch.maths import set_seed
    from omniisaacgymenvs.utils.task_util import import_tasks, initialize_task

    task_map, _ = import_tasks()
    if task not in task_map:
        env.close()
        raise OIGEError(f"OmniIsaacGymEnvs' task_map has no {task!r}; it has {', '.join(sorted(task_map))}")
    cfg["seed"] = set_seed(seed, torch_deterministic=cfg.get("torch_deterministic", False))
    initialize_task(cfg, env)

    from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

    return OmniIsaacGymWrapper(env)


def __getattr__(name: str) -> Any:
    if name == "OmniIsaacGymWrapper":  # lazily: the wrapper imports torch and skrl
        from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

        return OmniIsaacGymWrapper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
