"""Loading and validating the Hydra configuration (cfg/), before anything is built.

The runner uses Hydra's compose API rather than ``@hydra.main``: no working-directory change, no Hydra
output folder, and every bad input becomes one :class:`ConfigError` line instead of a traceback.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CACHE_CHECKS = ("identity", "content", "auto", "off")
ACTIVATIONS = ("elu", "relu", "tanh", "leaky_relu", "selu", "silu", "gelu")
LR_SCHEDULES = ("kl_adaptive", "fixed")
CHECK_FINITE = ("raise", "skip", "off")  # omni_sfp.agent.CHECK_FINITE (repeated: importing the agent imports skrl)


class ConfigError(ValueError):
    """A bad configuration value or override; the message names the key, the value and what is allowed."""


def config_dir() -> Path:
    """cfg/ inside the installed package, or at the root of a source checkout."""
    package = Path(__file__).resolve().parent
    installed = package / "cfg"
    return installed if (installed / "config.yaml").is_file() else package.parent / "cfg"


def load_config(overrides: list[str]) -> DictConfig:
    """Compose cfg/config.yaml with command-line style overrides (``key=value``) and validate it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    _refuse_new_keys(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = compose(config_name="config", overrides=route_task(overrides))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_one_line(error)) from None
    validate(cfg)
    return cfg


def route_task(overrides: list[str]) -> list[str]:
    """``task=<name>`` for a task without its own cfg/task/<name>.yaml (``gym:<Id>``, OmniIsaacGymEnvs and
    Isaac Lab names) selects the generic pair task/Generic.yaml + train/GenericPPO.yaml, named ``<name>``."""
    routed = []
    for override in overrides:
        key, sep, name = override.partition("=")
        if sep and key == "task" and not (config_dir() / "task" / f"{name}.yaml").is_file():
            routed += ["task=Generic", f"task.name='{name}'"]
        else:
            routed.append(override)
    return routed


def _refuse_new_keys(overrides: list[str]) -> None:
    """``+key=value`` would add a key no code reads (a typo that silently does nothing); only the task's
    constructor arguments, ``+task.env.<arg>=``, may be added (they are checked against the task below)."""
    for override in overrides:
        key = override.partition("=")[0]
        if key.startswith("+") and not key.lstrip("+").startswith("task.env."):
            raise ConfigError(f"{override}: {key.lstrip('+')!r} is not a configuration key (see cfg/config.yaml and "
                              "cfg/train/<Task>PPO.yaml for the keys; only +task.env.<argument>= may add one)")


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    if "Could not find 'task/" in text or "Could not find 'train/" in text:
        from omni_sfp.registry import list_tasks

        return f"{text.split('.')[0]}; known tasks: {', '.join(list_tasks())} (or gym:<Id>)"
    return text


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=True)


def _require(cfg: DictConfig, key: str, kind: type | tuple[type, ...], *, minimum: float | None = None,
             maximum: float | None = None, choices: tuple | None = None, allow_none: bool = False) -> Any:
    value = _get(cfg, key)
    if value is None and allow_none:
        return value
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ConfigError(f"{key}={value!r}: expected {names}{' or null' if allow_none else ''}")
    if choices is not None and value not in choices:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(map(str, choices))}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}={value!r}: must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}={value!r}: must be <= {maximum}")
    return value


def num_envs(cfg: DictConfig) -> int:
    """The effective number of environments: the top-level override, else the task's default."""
    return int(cfg.num_envs if cfg.num_envs is not None else cfg.task.env.num_envs)


def max_iterations(cfg: DictConfig) -> int:
    return int(cfg.max_iterations if cfg.max_iterations is not None else cfg.train.max_iterations)


def validate(cfg: DictConfig) -> None:
    """Check every key's type and range, and the combinations between them.

    :raises ConfigError: on the first bad value, naming the key, the value and what is allowed.
    """
    from omni_sfp.registry import get_task

    try:
        get_task(cfg.task.name)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    _require(cfg, "num_envs", int, minimum=1, allow_none=True)
    _require(cfg, "task.env.num_envs", int, minimum=1)
    _require(cfg, "seed", int, minimum=0, maximum=2**31 - 1)  # numpy's legacy seeding; skrl adds the rank
    device = _require(cfg, "device", str)
    if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ConfigError(f"device={device!r}: must be auto, cpu, cuda or cuda:N")
    _require(cfg, "headless", bool)
    _require(cfg, "torch_deterministic", bool)
    _require(cfg, "max_iterations", int, minimum=1, allow_none=True)
    _require(cfg, "train.max_iterations", int, minimum=1)
    experiment = _require(cfg, "experiment", str)
    if "/" in experiment or os.sep in experiment:
        raise ConfigError(f"experiment={experiment!r}: must be a folder-name suffix, without '/'")
    if _get(cfg, "task_name") != cfg.task.name:
        raise ConfigError(f"task_name={_get(cfg, 'task_name')!r}: read-only (it is task.name); choose the task with "
                          "task=<name>")
    _require(cfg, "checkpoint", str)
    _require(cfg, "test", bool)
    _require(cfg, "test_episodes", int, minimum=1)
    _require(cfg, "resume", bool)
    _require(cfg, "runs_dir", str)
    _require(cfg, "progress_file", str, allow_none=True)
    if cfg.test and not cfg.checkpoint:
        raise ConfigError("test=true needs checkpoint=<file or run folder>")
    if cfg.resume and not cfg.checkpoint:
        raise ConfigError("resume=true needs checkpoint=<run folder>")
    if cfg.resume and cfg.test:
        raise ConfigError("resume=true and test=true: resume continues training, test plays a checkpoint; pick one")

    _require(cfg, "train.mixed_precision", bool)
    _require(cfg, "train.sfp.enabled", bool)
    _require(cfg, "train.sfp.cache_check", str, choices=CACHE_CHECKS)
    _require(cfg, "train.models.separate", bool)
    units = _get(cfg, "train.models.units")
    if not OmegaConf.is_list(units) or not units or not all(isinstance(u, int) and u > 0 for u in units):
        raise ConfigError(f"train.models.units={OmegaConf.to_container(units) if OmegaConf.is_config(units) else units!r}: "
                          "must be a non-empty list of positive integers, e.g. [256,128,64]")
    _require(cfg, "train.models.activation", str, choices=ACTIVATIONS)
    _require(cfg, "train.models.initial_log_std", (int, float))
    _require(cfg, "train.models.compile", bool)

    ppo = "train.ppo."
    _require(cfg, ppo + "rollouts", int, minimum=1)
    _require(cfg, ppo + "learning_epochs", int, minimum=1)
    mini_batches = _require(cfg, ppo + "mini_batches", int, minimum=1)
    _require(cfg, ppo + "discount_factor", (int, float), minimum=0, maximum=1)
    _require(cfg, ppo + "gae_lambda", (int, float), minimum=0, maximum=1)
    _require(cfg, ppo + "learning_rate", (int, float), minimum=0)
    if _get(cfg, ppo + "learning_rate") <= 0:
        raise ConfigError(f"{ppo}learning_rate={_get(cfg, ppo + 'learning_rate')!r}: must be > 0")
    _require(cfg, ppo + "learning_rate_schedule", str, choices=LR_SCHEDULES)
    _require(cfg, ppo + "desired_kl", (int, float), minimum=0)
    if cfg.train.ppo.learning_rate_schedule == "kl_adaptive" and cfg.train.ppo.desired_kl <= 0:
        raise ConfigError(f"{ppo}desired_kl={cfg.train.ppo.desired_kl!r}: must be > 0 with "
                          "learning_rate_schedule=kl_adaptive")
    kl_threshold = _require(cfg, ppo + "kl_threshold", (int, float), minimum=0)
    if kl_threshold and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(f"{ppo}kl_threshold={kl_threshold!r}: must be 0 in a multi-process run (each rank would stop "
                          "its epoch on its own KL, and the ranks' gradient all-reduces would no longer pair up)")
    _require(cfg, ppo + "ratio_clip", (int, float), minimum=0)
    if cfg.train.ppo.ratio_clip <= 0:
        raise ConfigError(f"{ppo}ratio_clip={cfg.train.ppo.ratio_clip!r}: must be > 0")
    _require(cfg, ppo + "value_clip", (int, float), minimum=0)
    _require(cfg, ppo + "entropy_loss_scale", (int, float))
    _require(cfg, ppo + "value_loss_scale", (int, float), minimum=0)
    _require(cfg, ppo + "grad_norm_clip", (int, float), minimum=0)
    _require(cfg, ppo + "fused_optimizer", bool)
    _require(cfg, ppo + "time_limit_bootstrap", bool)
    _require(cfg, ppo + "observation_normalization", bool)
    _require(cfg, ppo + "value_normalization", bool)
    _require(cfg, ppo + "rewards_scale", (int, float))
    if cfg.train.ppo.rewards_scale <= 0:
        raise ConfigError(f"{ppo}rewards_scale={cfg.train.ppo.rewards_scale!r}: must be > 0")
    _require(cfg, "train.checkpoint_interval", int, minimum=0)
    _require(cfg, "train.keep_checkpoints", int, minimum=1)
    if isinstance(_get(cfg, "train.check_finite"), bool):
        raise ConfigError(f"train.check_finite={_get(cfg, 'train.check_finite')!r}: must be one of "
                          f"{', '.join(CHECK_FINITE)} (true/false of older configs: raise/off)")
    _require(cfg, "train.check_finite", str, choices=CHECK_FINITE)

    samples = num_envs(cfg) * cfg.train.ppo.rollouts
    if samples % mini_batches:
        raise ConfigError(
            f"train.ppo.mini_batches={mini_batches}: num_envs * rollouts = {num_envs(cfg)} * "
            f"{cfg.train.ppo.rollouts} = {samples} is not divisible by it"
        )
    _validate_task_env(cfg)


def _validate_task_env(cfg: DictConfig) -> None:
    """An embedded task's ``task.env`` keys are its constructor's keyword arguments: each must be one, of the
    default's type, and the task must accept the values (built once with one environment on the CPU, which
    runs its own range checks). Simulator and Gymnasium tasks get ``task.env`` as it is."""
    import importlib

    from omni_sfp.registry import get_task

    spec = get_task(cfg.task.name)
    if spec.kind != "embedded":
        return
    module_name, attr = spec.entry_point.split(":")
    task_class = getattr(importlib.import_module(module_name), attr)
    parameters = {p.name: p for p in inspect.signature(task_class).parameters.values() if p.kind == p.KEYWORD_ONLY}
    env = OmegaConf.to_container(cfg.task.env, resolve=True)
    values = {key: value for key, value in env.items() if key != "num_envs"}
    for key, value in values.items():
        if key not in parameters:
            raise ConfigError(f"task.env.{key}={value!r}: {cfg.task.name} takes no such argument; it takes "
                              f"{', '.join(parameters)}")
        default = parameters[key].default
        if isinstance(default, bool):
            kinds: tuple[type, ...] = (bool,)
        elif isinstance(default, int):
            kinds = (int,)
        elif isinstance(default, float):
            kinds = (int, float)
        elif isinstance(default, str):
            kinds = (str,)
        else:
            continue
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise ConfigError(f"task.env.{key}={value!r}: expected {' or '.join(k.__name__ for k in kinds)}")
    try:
        task_class(1, "cpu", 0, **values).close()
    except (ValueError, TypeError, ArithmeticError) as error:
        raise ConfigError(f"task.env ({cfg.task.name}): {' '.join(str(error).split())}") from None
