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

from omni_sfp.config.schema import DEVICE_GRAMMAR, parse_device

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
    return Path(next(iter(spec.submodule_search_locations)))


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
    from omni_sfp.envs import registry

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
    """OmniIsaacGymEnvs' device keys for omni_sfp's ``device`` (:func:`omni_sfp.config.schema.parse_device`)."""
    try:
        kind, index = parse_device(device)
    except ValueError:
        raise OIGEError(f"device={device!r} is not allowed for OmniIsaacGymEnvs: expected {DEVICE_GRAMMAR}") from None
    if kind == "auto":
        kind = "cuda" if cuda_available else "cpu"
    if kind == "cpu":
        return {"pipeline": "cpu", "sim_device": "cpu", "device_id": 0, "rl_device": "cpu"}
    index = index or 0
    return {"pipeline": "gpu", "sim_device": "gpu", "device_id": index, "rl_device": f"cuda:{index}"}


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


def compose(
    task: str,
    *,
    values: Mapping[str, Any] | None = None,
    task_env: Mapping[str, Any] | None = None,
    package: Path | None = None,
) -> dict[str, Any]:
    """OmniIsaacGymEnvs' resolved config for ``task``, composed by Hydra the way ``rlgames_train.py`` does.

    Hydra's ``defaults:`` apply (``CartpoleCamera.yaml`` inherits ``Cartpole.yaml``, ``ShadowHandOpenAI_LSTM``
    ``ShadowHandOpenAI_FF``), then ``values`` land at the root (``num_envs``, ``seed``, devices, ...) and
    ``task_env`` under ``task.env`` (as ``task.env.<key>=`` would on OIGE's command line; an unknown key is an
    error, as it is there), before the interpolations resolve. Hydra's global state is left as it was.

    :raises OIGEError: OmniIsaacGymEnvs missing, unknown task, or a ``task_env`` key its task config lacks.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    package = package or package_dir()
    if package is None:
        raise OIGEError("OmniIsaacGymEnvs is not installed: `python.sh -m pip install -e OmniIsaacGymEnvs`")
    if task not in task_names(package):
        raise OIGEError(f"OmniIsaacGymEnvs has no task {task!r}; its tasks: {', '.join(task_names(package))}")
    _register_resolvers()
    hydra = GlobalHydra.instance()
    if hydra.is_initialized():  # e.g. left on OIGE's cfg/ by make_oige_env: compose in a fresh one, then restore
        saved = hydra.hydra
        hydra.clear()
    else:
        saved = None
    try:
        with initialize_config_dir(config_dir=str(package / "cfg"), version_base=None):
            root = hydra_compose(config_name="config", overrides=[f"task={task}"])
    finally:
        if saved is not None:
            GlobalHydra.instance().initialize(saved)
    with open_dict(root):
        for key, value in (values or {}).items():
            root[key] = value
    for key, value in (task_env or {}).items():
        if OmegaConf.select(root.task.env, key, default="<missing>") == "<missing>":
            known = ", ".join(str(k) for k in root.task.env)
            raise OIGEError(f"task.env.{key}: OmniIsaacGymEnvs' task/{task}.yaml has no env.{key}; it has {known}")
        OmegaConf.update(root.task.env, key, value, merge=True)
    resolved = OmegaConf.to_container(root, resolve=True)
    assert isinstance(resolved, dict)
    resolved.pop("hydra", None)
    return copy.deepcopy(resolved)


def oige_config(
    task: str,
    *,
    num_envs: int,
    seed: int,
    headless: bool,
    device_keys: Mapping[str, Any],
    task_cfg: Mapping[str, Any] | None = None,
    torch_deterministic: bool = False,
    package: Path | None = None,
) -> dict[str, Any]:
    """The resolved config dict OmniIsaacGymEnvs' ``initialize_task`` takes: ``rlgames_train.py task=<task>
    num_envs=<n> seed=<s> headless=<h> torch_deterministic=<d>`` plus the devices, with ``task_cfg`` (omni_sfp's
    ``task.env``) under ``task.env``."""
    values = {
        "num_envs": num_envs,
        "seed": seed,
        "headless": headless,
        "test": False,
        "torch_deterministic": torch_deterministic,
        **device_keys,
    }
    return compose(task, values=values, task_env=task_cfg, package=package)


def initialize_hydra(package: Path) -> None:
    """Leave Hydra's global state initialised on OIGE's ``cfg/``, as ``@hydra.main`` in ``rlgames_train.py``
    does: the Factory tasks call ``hydra.compose("task/FactoryBase.yaml")`` themselves in their constructors."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    initialize_config_dir(config_dir=str(package / "cfg"), version_base=None)  # not a `with`: it stays


def experience_for(cfg: Mapping[str, Any], headless: bool, package: Path) -> tuple[str | None, bool]:
    """The Kit app file and ``enable_viewport`` for a composed config, as ``rlgames_train.py`` picks them:
    a camera task (``task.sim.enable_cameras``) gets OIGE's ``apps/omni.isaac.sim.python.gym.camera.kit`` and a
    viewport; otherwise omni_sfp's headless experience (:func:`default_experience`) or Isaac Sim's own."""
    if cfg.get("task", {}).get("sim", {}).get("enable_cameras", False):
        return str((package.parent / "apps" / "omni.isaac.sim.python.gym.camera.kit").resolve()), True
    return default_experience(headless), False


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
    device: Any,
    seed: int,
    headless: bool = True,
    task_cfg: Mapping[str, Any] | None = None,
    experience: str | None = None,
) -> OmniIsaacGymWrapper:
    """Start Isaac Sim, build OmniIsaacGymEnvs task ``name`` and wrap it for skrl 2, as ``rlgames_train.py`` does.

    Isaac Sim starts before anything else from Omniverse is imported: VecEnvRLGames' constructor creates the
    ``SimulationApp`` (with a viewport and OIGE's camera experience for camera tasks); only afterwards are
    ``omni.isaac.core`` and the task modules imported. Hydra is left initialised on OIGE's ``cfg/`` for the
    tasks that compose their own configs. ``torch_deterministic`` follows the runner's
    ``torch.use_deterministic_algorithms`` (omni_sfp's ``torch_deterministic``). The env (and with it the app) is
    closed by the wrapper's ``close()`` or at interpreter exit. One SimulationApp per process: build one
    OmniIsaacGymEnvs env per process. Run it with Isaac Sim's ``python.sh``.

    :param name: registry name (``Ant`` or ``OIGE-Cartpole``).
    :param task_cfg: keys under OIGE's ``task.env`` (``{"envSpacing": 2.0}``).
    :param experience: Kit app file; default :func:`experience_for`.
    :raises OIGEError: OmniIsaacGymEnvs missing, unknown task, task key or device.
    """
    import atexit

    import torch

    task = name.removeprefix(PREFIX)
    package = package_dir()
    keys = devices(str(device), torch.cuda.is_available())
    cfg = oige_config(
        task,
        num_envs=num_envs,
        seed=seed,
        headless=headless,
        device_keys=keys,
        task_cfg=task_cfg,
        torch_deterministic=torch.are_deterministic_algorithms_enabled(),
        package=package,
    )
    assert package is not None  # oige_config raised otherwise
    default_app, enable_viewport = experience_for(cfg, headless, package)

    # 1. Isaac Sim (SimulationApp) first.
    from omniisaacgymenvs.envs.vec_env_rlgames import VecEnvRLGames

    env = VecEnvRLGames(
        headless=headless,
        sim_device=keys["device_id"],
        enable_livestream=False,
        enable_viewport=enable_viewport,
        experience=experience or default_app,
    )
    atexit.register(env.close)  # rlgames_train.py closes the env (and the app) at the end
    try:
        # 2. Now omni.isaac.core and the task classes can be imported.
        from omni.isaac.core.utils.torch.maths import set_seed
        from omniisaacgymenvs.utils.task_util import import_tasks, initialize_task

        task_map, _ = import_tasks()
        # initialize_task looks up cfg.task_name (config.yaml: ${task.name}), the class's name, which is not
        # always the file's: task/ShadowHandOpenAI_FF.yaml names ShadowHand
        class_name = cfg["task_name"]
        if class_name not in task_map:
            raise OIGEError(
                f"OmniIsaacGymEnvs' task_map has no {class_name!r} (task/{task}.yaml: name); "
                f"it has {', '.join(sorted(task_map))}"
            )
        cfg["seed"] = set_seed(seed, torch_deterministic=cfg["torch_deterministic"])
        initialize_hydra(package)
        initialize_task(cfg, env)
    except BaseException:
        atexit.unregister(env.close)
        env.close()
        raise

    from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

    wrapper = OmniIsaacGymWrapper(env)
    atexit.unregister(env.close)
    atexit.register(wrapper.close)
    return wrapper


def __getattr__(name: str) -> Any:
    if name == "OmniIsaacGymWrapper":  # lazily: the wrapper imports torch and skrl
        from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

        return OmniIsaacGymWrapper
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
