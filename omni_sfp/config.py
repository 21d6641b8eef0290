"""Loading and validating the Hydra configuration (cfg/), before anything is built.

The runner uses Hydra's compose API rather than ``@hydra.main``: no working-directory change, no Hydra
output folder, and every bad input becomes one :class:`ConfigError` line instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CACHE_CHECKS = ("identity", "content", "auto", "off")
ACTIVATIONS = ("elu", "relu", "tanh", "leaky_relu", "selu", "silu", "gelu")
LR_SCHEDULES = ("kl_adaptive", "fixed")


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

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_one_line(error)) from None
    validate(cfg)
    return cfg


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
    _require(cfg, "seed", int, minimum=0)
    device = _require(cfg, "device", str)
    if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ConfigError(f"device={device!r}: must be auto, cpu, cuda or cuda:N")
    _require(cfg, "headless", bool)
    _require(cfg, "torch_deterministic", bool)
    _require(cfg, "max_iterations", int, minimum=1, allow_none=True)
    _require(cfg, "train.max_iterations", int, minimum=1)
    _require(cfg, "experiment", str)
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
    _require(cfg, ppo + "kl_threshold", (int, float), minimum=0)
    _require(cfg, ppo + "ratio_clip", (int, float), minimum=0)
    _require(cfg, ppo + "value_clip", (int, float), minimum=0)
    _require(cfg, ppo + "entropy_loss_scale", (int, float))
    _require(cfg, ppo + "value_loss_scale", (int, float), minimum=0)
    _require(cfg, ppo + "grad_norm_clip", (int, float), minimum=0)
    _require(cfg, ppo + "time_limit_bootstrap", bool)
    _require(cfg, ppo + "observation_normalization", bool)
    _require(cfg, ppo + "value_normalization", bool)
    _require(cfg, ppo + "rewards_scale", (int, float))
    _require(cfg, "train.checkpoint_interval", int, minimum=0)
    _require(cfg, "train.keep_checkpoints", int, minimum=1)
    _require(cfg, "train.check_finite", bool)

    samples = num_envs(cfg) * cfg.train.ppo.rollouts
    if samples % mini_batches:
        raise ConfigError(
            f"train.ppo.mini_batches={mini_batches}: num_envs * rollouts = {num_envs(cfg)} * "
            f"{cfg.train.ppo.rollouts} = {samples} is not divisible by it"
        )
