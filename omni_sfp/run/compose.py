"""Loading and validating the Hydra configuration (cfg/), before anything is built.

Every key's type, default, range and doc are defined once in :mod:`omni_sfp.config.schema` (cfg/config.yaml and
cfg/train/PPO.yaml are generated from it); :func:`validate` checks each key against it, then the combinations
between keys. What the outputs (video, export, W&B) need of their own keys, they check themselves
(:func:`omni_sfp.run.outputs.base.check_config`), one layer up: compose imports no output. The runner uses Hydra's compose API rather than ``@hydra.main``: no working-directory change, no Hydra
output folder, and every bad input becomes one :class:`ConfigError` line instead of a traceback.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from omni_sfp.config import schema
from omni_sfp.config.schema import ConfigError, config_dir
from omni_sfp.config.values import isaaclab_overrides, num_envs, quote_preset_lists


def load_config(overrides: list[str]) -> DictConfig:
    """Compose cfg/config.yaml with command-line style overrides (``key=value``) and validate it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = quote_preset_lists(overrides)
    _refuse_new_keys(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = compose(config_name="config", overrides=route_task(overrides))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_one_line(error)) from None
    from omni_sfp.envs import upstream  # a simulator task's own tuned settings; the command line's keys still win

    try:
        upstream.apply(cfg, overrides)
    except (ValueError, RuntimeError, OmegaConfBaseException) as error:
        raise ConfigError(_one_line(error)) from None
    validate(cfg)
    return cfg


def route_task(overrides: list[str]) -> list[str]:
    """``task=<name>`` for a task without its own cfg/task/<name>.yaml (``gym:<Id>``, OmniIsaacGymEnvs and
    Isaac Lab names) selects the generic pair task/Generic.yaml + train/GenericPPO.yaml, named ``<name>``; a
    Gymnasium id with a train file of its own (train/<Id>PPO.yaml, the MuJoCo tasks) takes that one instead."""
    routed = []
    for override in overrides:
        key, sep, name = override.partition("=")
        if sep and key == "task" and not (config_dir() / "task" / f"{name}.yaml").is_file():
            routed += ["task=Generic", f"task.name='{name}'"]
            if name.startswith("gym:") and (config_dir() / "train" / f"{name[4:]}PPO.yaml").is_file():
                routed.append(f"train={name[4:]}PPO")
        else:
            routed.append(override)
    return routed


def _refuse_new_keys(overrides: list[str]) -> None:
    """``+key=value`` would add a key no code reads (a typo that silently does nothing); only the task's
    constructor arguments, ``+task.env.<arg>=``, may be added (they are checked against the task below)."""
    for override in overrides:
        key = override.partition("=")[0]
        if key.startswith("+") and not key.lstrip("+").startswith("task.env."):
            raise ConfigError(
                f"{override}: {key.lstrip('+')!r} is not a configuration key (see cfg/config.yaml and "
                "cfg/train/<Task>PPO.yaml for the keys; only +task.env.<argument>= may add one)"
            )


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    if "Could not find 'task/" in text or "Could not find 'train/" in text:
        from omni_sfp.envs.registry import list_tasks

        return f"{text.split('.')[0]}; known tasks: {', '.join(list_tasks())} (or gym:<Id>)"
    return text


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, throw_on_missing=True)


def _check(cfg: DictConfig, key: str) -> Any:
    """The value of ``key``, checked against its :mod:`omni_sfp.config.schema` entry (type, range, choices)."""
    value = _get(cfg, key)
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    problem = schema.setting(key).problem(value)
    if problem is not None:
        raise ConfigError(f"{key}={value!r}: {problem}")
    return value


def validate(cfg: DictConfig) -> None:
    """Check every key of the schema (type, range, choices), then the combinations between keys.

    :raises ConfigError: on the first bad value, naming the key, the value and what is allowed.
    """
    from omni_sfp.envs.registry import get_task

    try:
        spec = get_task(cfg.task.name)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if _get(cfg, "task_name") != cfg.task.name:
        raise ConfigError(
            f"task_name={_get(cfg, 'task_name')!r}: read-only (it is task.name); choose the task with task=<name>"
        )
    check_finite = _get(cfg, "train.check_finite")
    if isinstance(check_finite, bool):
        raise ConfigError(
            f"train.check_finite={check_finite!r}: must be one of {', '.join(schema.CHECK_FINITE)} "
            "(true/false of older configs: raise/off)"
        )
    for setting in schema.SETTINGS:
        if setting.key != "task":  # a Hydra group, checked by the registry above
            _check(cfg, setting.key)
    tokens = isaaclab_overrides(cfg)
    if tokens and spec.kind != "isaaclab":
        raise ConfigError(
            f"{' '.join(tokens)}: Isaac Lab's selector tokens (presets=, physics=, renderer=) pick an Isaac Lab "
            f"task's config alternatives; task {cfg.task.name!r} is not an Isaac Lab task ({spec.kind})"
        )
    _require_int(cfg, "task.env.num_envs", minimum=1)

    experiment = cfg.experiment
    if "/" in experiment or os.sep in experiment:
        raise ConfigError(f"experiment={experiment!r}: must be a folder-name suffix, without '/'")
    _check_device_exists(cfg.device)
    if cfg.test and not cfg.checkpoint:
        raise ConfigError("test=true needs checkpoint=<file or run folder>")
    if cfg.resume and not cfg.checkpoint:
        raise ConfigError("resume=true needs checkpoint=<run folder>")
    if cfg.resume and cfg.test:
        raise ConfigError("resume=true and test=true: resume continues training, test plays a checkpoint; pick one")
    if cfg.test_checkpoint != "last" and not cfg.test:
        raise ConfigError(
            f"test_checkpoint={cfg.test_checkpoint}: picks the checkpoint test=true plays; training and resume=true "
            "continue from last.pt"
        )
    if cfg.test_checkpoint != "last" and cfg.checkpoint and not os.path.isdir(cfg.checkpoint):
        raise ConfigError(
            f"test_checkpoint={cfg.test_checkpoint} picks a file in a run folder, and checkpoint={cfg.checkpoint} "
            "is no folder: pass the run folder, or the file alone"
        )

    ppo = cfg.train.ppo
    if ppo.learning_rate_schedule == "kl_adaptive" and ppo.desired_kl <= 0:
        raise ConfigError(
            f"train.ppo.desired_kl={ppo.desired_kl!r}: must be > 0 with learning_rate_schedule=kl_adaptive"
        )
    if ppo.kl_threshold and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            f"train.ppo.kl_threshold={ppo.kl_threshold!r}: must be 0 in a multi-process run (each rank "
            "would stop its epoch on its own KL, and the ranks' gradient all-reduces would no longer "
            "pair up)"
        )
    samples = num_envs(cfg) * ppo.rollouts
    if samples % ppo.mini_batches:
        raise ConfigError(
            f"train.ppo.mini_batches={ppo.mini_batches}: num_envs * rollouts = {num_envs(cfg)} * "
            f"{ppo.rollouts} = {samples} is not divisible by it"
        )
    if cfg.train.capture is True and ppo.kl_threshold:
        raise ConfigError(
            f"train.capture=true: train.ppo.kl_threshold={ppo.kl_threshold!r} stops an epoch on a host read, so the "
            "step cannot be captured; set train.ppo.kl_threshold=0 or train.capture=auto"
        )
    _validate_task_env(cfg)
    _validate_network(cfg)


def _validate_network(cfg: DictConfig) -> None:
    """``train.models.network`` parses (its fit to the task's spaces is checked when the models are built), and a
    recurrent one's sequences fit the rollout."""
    spec = _get(cfg, "train.models.network")
    if spec is not None:
        from omni_sfp.sfp import network  # torch: only when a network is given

        parsed = network.parse(OmegaConf.to_container(spec, resolve=True))
        if parsed.rnn is not None:
            rollouts, length = _get(cfg, "train.ppo.rollouts"), parsed.rnn.sequence_length
            if isinstance(rollouts, int) and rollouts % length:
                raise ConfigError(
                    f"train.ppo.rollouts ({rollouts}) must be a multiple of the recurrent network's sequence_length "
                    f"({length}): the update trains on whole sequences"
                )


def _require_int(cfg: DictConfig, key: str, *, minimum: int) -> int:
    value = _get(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}={value!r}: expected int")
    if value < minimum:
        raise ConfigError(f"{key}={value!r}: must be >= {minimum}")
    return value


def _check_device_exists(device: str) -> None:
    """A CUDA device this machine lacks is bad input (exit 2), found before anything is built."""
    kind, index = schema.parse_device(device)  # the grammar itself was checked with the other settings
    if kind != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"device={device!r}: CUDA is not available on this machine (use device=cpu or auto)")
    if index is not None and index >= torch.cuda.device_count():
        raise ConfigError(
            f"device={device!r}: this machine has {torch.cuda.device_count()} GPU(s) (cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1})"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if index is None and int(os.environ.get("WORLD_SIZE", "1")) > 1 and local_rank >= torch.cuda.device_count():
        raise ConfigError(
            f"device=cuda: this is process LOCAL_RANK={local_rank} and the machine has "
            f"{torch.cuda.device_count()} GPU(s); start at most that many processes per node "
            "(torchrun --nproc_per_node) or pass device=cpu"
        )


def _validate_task_env(cfg: DictConfig) -> None:
    """An embedded task's ``task.env`` keys are its constructor's keyword arguments: each must be one, of the
    default's type, and the task must accept the values (built once with one environment on the CPU, which
    runs its own range checks). Simulator and Gymnasium tasks get ``task.env`` as it is."""
    from omni_sfp.envs.registry import get_task

    spec = get_task(cfg.task.name)
    if spec.kind != "embedded":
        return
    task_class = spec.load()
    parameters = {p.name: p for p in inspect.signature(task_class).parameters.values() if p.kind == p.KEYWORD_ONLY}
    env = OmegaConf.to_container(cfg.task.env, resolve=True)
    values = {key: value for key, value in env.items() if key != "num_envs"}
    for key, value in values.items():
        if key not in parameters:
            raise ConfigError(
                f"task.env.{key}={value!r}: {cfg.task.name} takes no such argument; it takes {', '.join(parameters)}"
            )
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
