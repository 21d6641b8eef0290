"""Upstream settings by default: a simulator task trains with the settings its own library tunes for it.

A user who switches from OmniIsaacGymEnvs' ``rlgames_train.py task=Ant`` or Isaac Lab's skrl ``train.py
--task Isaac-Ant`` expects the same task to train with the same settings, only faster. So, for

- an **Isaac Lab id**: its registered ``skrl_cfg_entry_point`` YAML (skrl's Runner format: ``models``,
  ``agent``, ``trainer``) and its env config's ``scene.num_envs``;
- an **OmniIsaacGymEnvs task**: its ``train/<Task>PPO.yaml`` (rl_games ``params``), composed the way
  ``rlgames_train.py`` composes it, and its ``task.env.numEnvs``;

are mapped onto omni_sfp's keys (``train.ppo.*``, ``train.models.*``, ``train.max_iterations``,
``task.env.num_envs``). :func:`apply` writes them into the composed config *except* the keys the user set on
the command line, which still win, and records each one in ``task.upstream`` (``key: "value <- file: upstream
key"``), which the run folder's ``config.yaml`` keeps. Upstream keys without an omni_sfp counterpart
(rl_games' ``mixed_precision``, ...) are not mapped; see docs/isaac-sim.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from omni_sfp.config import schema
from omni_sfp.config.values import isaaclab_overrides

ACTIVATIONS = tuple(schema.ACTIVATIONS)  # the activations omni_sfp builds
# keys set on the command line that stand for a mapped key (top-level shortcuts win over the task/train keys)
SHORTCUTS = {"num_envs": "task.env.num_envs", "max_iterations": "train.max_iterations"}


@dataclass(frozen=True)
class Setting:
    """One upstream value mapped onto an omni_sfp key."""

    key: str  # omni_sfp key, e.g. "train.ppo.rollouts"
    value: Any
    source: str  # where it came from, e.g. "AntPPO.yaml: params.config.horizon_length"

    @property
    def shown(self) -> str:
        """The value as printed: a network spec (a mapping) is summarised in the source instead."""
        return "{...}" if isinstance(self.value, Mapping) else repr(self.value)

    def line(self) -> str:
        return f"{self.key}={self.shown}  <- {self.source}"


class UpstreamError(ValueError):
    """An upstream config could not be read or mapped; one line naming the file and key."""


def settings_for(task: str, *, num_envs: int | None = None, overrides: list[str] | None = None) -> list[Setting]:
    """The upstream settings of registry task ``task`` (empty for embedded and Gymnasium tasks).

    :param num_envs: the user's ``num_envs`` override, if any: rl_games fixes the minibatch *size*, so the number
        of minibatches follows the number of environments actually simulated.
    :param overrides: Isaac Lab's selector tokens (``["presets=dict_box"]``): they pick the env config and the
        member of a skrl config family.
    """
    from omni_sfp.envs.registry import get_task

    spec = get_task(task)
    if spec.kind == "isaaclab":
        return isaaclab_settings(task, overrides or [])
    if spec.kind == "oige":
        from omni_sfp.envs import oige

        name = task.removeprefix(oige.PREFIX)  # the config files' name (task.name is the task class's: ShadowHand)
        cfg = oige.compose(name)
        return rlgames_settings(cfg["train"], cfg["task"], f"{name}PPO.yaml", f"{name}.yaml", num_envs=num_envs)
    return []


def apply(cfg: DictConfig, overrides: list[str], *, echo: bool = True) -> list[Setting]:
    """Write ``task``'s upstream settings into ``cfg`` where the command line did not set the key.

    Records what it took in ``cfg.task.upstream`` and, with ``echo``, prints one line per setting.
    """
    user = {o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o}
    user |= {mapped for shortcut, mapped in SHORTCUTS.items() if shortcut in user}
    user_envs = cfg.num_envs if "num_envs" in user else None
    tokens = isaaclab_overrides(cfg)
    taken = [s for s in settings_for(cfg.task.name, num_envs=user_envs, overrides=tokens) if s.key not in user]
    with open_dict(cfg):
        for setting in taken:
            OmegaConf.update(cfg, setting.key, setting.value, merge=False)
        cfg.task.upstream = {s.key: f"{s.shown} <- {s.source}" for s in taken}
    if echo and taken:
        print(f"[omni_sfp] {cfg.task.name}: {len(taken)} upstream settings (command-line overrides win):", flush=True)
        for setting in taken:
            print(f"[omni_sfp]   {setting.line()}", flush=True)
    return taken


def _network_settings(models: Mapping[str, Any], source: str) -> list[Setting]:
    """A registered network (skrl's YAML model format) on omni_sfp's keys: a plain MLP as ``train.models.units``
    and ``activation`` (the tuned MLP models train it), anything else whole as ``train.models.network``.

    :raises UpstreamError: a network omni_sfp does not build (one line naming the file and the part).
    """
    from omni_sfp.sfp import network

    models = _plain(models)
    try:
        spec = network.parse(models, source=source)
    except network.NetworkSpecError as error:
        raise UpstreamError(str(error)) from None
    plain = network.plain_mlp(spec)
    if plain is None or plain[1] not in ACTIVATIONS:
        return [Setting("train.models.network", models, f"{source}.policy/value: {network.summary(spec)}")]
    units, activation = plain
    return [
        Setting("train.models.units", units, f"{source}.policy.network[0].layers"),
        Setting("train.models.activation", activation, f"{source}.policy.network[0].activations"),
    ]


def _plain(value: Any) -> Any:
    """An OmegaConf or YAML value as plain dicts and lists (what the config stores and the run folder writes)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# -- Isaac Lab: skrl Runner YAML ------------------------------------------------------------------------------


def isaaclab_settings(task: str, overrides: list[str] | None = None) -> list[Setting]:
    """Isaac Lab id ``task``'s registered skrl config and ``scene.num_envs`` on omni_sfp's keys.

    Both are resolved by Isaac Lab with the selector tokens ``overrides`` (``presets=dict_box``): a presets
    container (Isaac-Cartpole-Camera-Direct) or a skrl config family (IsaacContrib-Cartpole-Showcase-Direct:
    ``preset(default=..., **configs)``) gives the selected member, or its default.
    """
    from omni_sfp.envs import isaaclab

    overrides = list(overrides or [])
    kwargs = isaaclab.gymnasium_kwargs(task)
    out = []
    env_cfg, agent_cfg = isaaclab.resolve_configs(task, overrides, "skrl_cfg_entry_point")
    picked = f" ({' '.join(overrides)})" if overrides else ""
    env_source = kwargs["env_cfg_entry_point"]
    env_source = env_source if isinstance(env_source, str) else getattr(env_source, "__qualname__", str(env_source))
    out.append(Setting("task.env.num_envs", int(env_cfg.scene.num_envs), f"{env_source}{picked}: scene.num_envs"))
    entry = kwargs.get("skrl_cfg_entry_point")
    if entry is None or agent_cfg is None:
        return out
    return out + skrl_settings(agent_cfg, f"{entry}{picked}")


def skrl_settings(runner_cfg: Mapping[str, Any], source: str) -> list[Setting]:
    """A skrl Runner config (``models``/``agent``/``trainer``, skrl 1.x or 2.x key names) on omni_sfp's keys."""
    out: list[Setting] = []

    def take(key: str, value: Any, upstream_key: str) -> None:
        out.append(Setting(key, value, f"{source}: {upstream_key}"))

    models = runner_cfg.get("models", {}) or {}
    agent = runner_cfg.get("agent", {}) or {}
    if agent.get("class", "PPO") != "PPO":
        raise UpstreamError(f"{source}: agent.class is {agent.get('class')!r}; omni_sfp trains PPO")
    if "separate" in models:
        take("train.models.separate", bool(models["separate"]), "models.separate")
    policy = models.get("policy", {}) or {}
    network = (policy.get("network") or [{}])[0]
    if policy.get("network"):
        out += _network_settings({"policy": policy, "value": models.get("value") or {}}, f"{source}: models")
    if "initial_log_std" in policy and not any(s.key == "train.models.network" for s in out):
        take("train.models.initial_log_std", float(policy["initial_log_std"]), "models.policy.initial_log_std")
    take("train.ppo.bounds_loss_scale", 0.0, "agent.class PPO (skrl's PPO has no bound loss)")
    take("train.ppo.learning_rate_anneal", False, "agent.class PPO (skrl's PPO anneals no learning rate)")
    if network:  # skrl's model instantiators build nn.Linear layers and keep their default init
        take("train.models.init", "torch", "models.policy.network (skrl's instantiator: nn.Linear's default init)")

    simple = {
        "rollouts": ("rollouts", int),
        "learning_epochs": ("learning_epochs", int),
        "mini_batches": ("mini_batches", int),
        "discount_factor": ("discount_factor", float),
        "gae_lambda": ("lambda", float),
        "learning_rate": ("learning_rate", float),
        "grad_norm_clip": ("grad_norm_clip", float),
        "ratio_clip": ("ratio_clip", float),
        "entropy_loss_scale": ("entropy_loss_scale", float),
        "value_loss_scale": ("value_loss_scale", float),
        "kl_threshold": ("kl_threshold", float),
        "rewards_scale": ("rewards_shaper_scale", float),
        "time_limit_bootstrap": ("time_limit_bootstrap", bool),
    }
    for ours, (theirs, kind) in simple.items():
        if ours == "gae_lambda" and "lambda" not in agent and "gae_lambda" in agent:
            theirs = "gae_lambda"  # skrl 2.x name
        if agent.get(theirs) is not None:
            take(f"train.ppo.{ours}", kind(agent[theirs]), f"agent.{theirs}")
    from skrl.agents.torch.ppo import PPO_CFG

    skrl_defaults = PPO_CFG()  # what skrl's PPO takes for a key the config leaves out, where ours differs
    for key in ("rollouts", "learning_epochs", "value_clip"):
        if key not in agent:
            take(f"train.ppo.{key}", getattr(skrl_defaults, key), f"agent.{key} (absent: skrl's PPO_CFG default)")
    if "value_clip" in agent:
        clipped = agent.get("clip_predicted_values", True)
        take(
            "train.ppo.value_clip",
            float(agent["value_clip"]) if clipped else 0.0,
            "agent.value_clip" + ("" if clipped else " (clip_predicted_values: False)"),
        )
    if "learning_rate_scheduler" not in agent:  # skrl's PPO_CFG has none: a fixed rate, whatever GenericPPO says
        take(
            "train.ppo.learning_rate_schedule", "fixed", "agent.learning_rate_scheduler (absent: skrl's default, none)"
        )
    else:
        scheduler = agent["learning_rate_scheduler"]
        if scheduler in (None, "", "None"):
            take("train.ppo.learning_rate_schedule", "fixed", "agent.learning_rate_scheduler")
        elif "KLAdaptive" in str(scheduler):
            take("train.ppo.learning_rate_schedule", "kl_adaptive", "agent.learning_rate_scheduler")
            kwargs = agent.get("learning_rate_scheduler_kwargs") or {}
            take(
                "train.ppo.max_learning_rate",
                float(kwargs.get("max_lr", 1e-2)),
                "agent.learning_rate_scheduler_kwargs.max_lr"
                + ("" if "max_lr" in kwargs else " (KLAdaptiveLR's default)"),
            )
            if "kl_threshold" in kwargs:
                take(
                    "train.ppo.desired_kl",
                    float(kwargs["kl_threshold"]),
                    "agent.learning_rate_scheduler_kwargs.kl_threshold",
                )
    for ours, theirs in (
        ("observation_normalization", "state_preprocessor"),
        ("value_normalization", "value_preprocessor"),
    ):
        if theirs == "state_preprocessor" and theirs not in agent and "observation_preprocessor" in agent:
            theirs = "observation_preprocessor"  # skrl 2.x name
        if theirs in agent:
            take(f"train.ppo.{ours}", bool(agent[theirs]) and agent[theirs] != "None", f"agent.{theirs}")
    trainer = runner_cfg.get("trainer", {}) or {}
    rollouts = int(agent.get("rollouts") or skrl_defaults.rollouts)
    if trainer.get("timesteps") and rollouts:
        iterations = max(1, math.ceil(int(trainer["timesteps"]) / rollouts))
        take("train.max_iterations", iterations, f"trainer.timesteps ({trainer['timesteps']}) / agent.rollouts")
    return out


# -- OmniIsaacGymEnvs: rl_games YAML ---------------------------------------------------------------------------


def _rlgames_network(
    network_block: Mapping[str, Any], central: Mapping[str, Any] | None, train_file: str, seq_length: int | None = None
) -> list[Setting]:
    """rl_games' ``cnn``, ``rnn`` (with ``config.seq_length``), discrete spaces and ``central_value_config`` (a critic
    on ``states``) as ``train.models.network``."""
    from omni_sfp.sfp import network

    critic = (central or {}).get("network")
    try:
        models = network.from_rlgames(
            _plain(network_block), central_value=_plain(critic) if critic else None, seq_length=seq_length
        )
        spec = network.parse(models, source=f"{train_file}: params.network")
    except network.NetworkSpecError as error:
        raise UpstreamError(f"{train_file}: {error}") from None
    source = f"{train_file}: params.network" + (" + params.config.central_value_config.network" if critic else "")
    if central:  # rl_games trains the central value with its own optimizer; omni_sfp's one optimizer trains both
        own = sorted(k for k in central if k not in ("network", "normalize_input"))
        source += f" (its own {', '.join(own)} are not mapped: one optimizer trains both roles)" if own else ""
    return [Setting("train.models.network", models, f"{source}: {network.summary(spec)}")]


def rlgames_settings(
    train: Mapping[str, Any], task: Mapping[str, Any], train_file: str, task_file: str, *, num_envs: int | None = None
) -> list[Setting]:
    """A resolved rl_games train config (OIGE's ``train/<Task>PPO.yaml``) and task config on omni_sfp's keys."""
    out: list[Setting] = []

    def take(key: str, value: Any, source: str) -> None:
        out.append(Setting(key, value, source))

    params = train["params"]
    config = params["config"]
    cfile = f"{train_file}: params.config."
    upstream_envs = int(task["env"]["numEnvs"])
    take("task.env.num_envs", upstream_envs, f"{task_file}: env.numEnvs")
    network = params.get("network", {}) or {}
    if "separate" in network:
        take("train.models.separate", bool(network["separate"]), f"{train_file}: params.network.separate")
    mlp = network.get("mlp", {}) or {}
    space = network.get("space", {}) or {}
    central = config.get("central_value_config")
    if network.get("cnn") or network.get("rnn") or (space and "continuous" not in space) or central:
        seq_length = config.get("seq_length")  # rl_games 1.6 reads seq_length only (OIGE's seq_len: its default, 4)
        out += _rlgames_network(network, central, train_file, int(seq_length) if seq_length else None)
    else:
        if mlp.get("units"):
            take("train.models.units", [int(u) for u in mlp["units"]], f"{train_file}: params.network.mlp.units")
        if mlp.get("activation") in ACTIVATIONS:
            take("train.models.activation", mlp["activation"], f"{train_file}: params.network.mlp.activation")
    if ((mlp.get("initializer") or {}).get("name")) == "default":  # rl_games keeps the weights, zeroes the biases
        take("train.models.init", "torch_zero_bias", f"{train_file}: params.network.mlp.initializer.name")
    sigma = ((network.get("space", {}) or {}).get("continuous", {}) or {}).get("sigma_init", {}) or {}
    if sigma.get("name") == "const_initializer" and "val" in sigma:
        take(
            "train.models.initial_log_std",
            float(sigma["val"]),
            f"{train_file}: params.network.space.continuous.sigma_init.val",
        )

    horizon = int(config["horizon_length"])
    take("train.ppo.rollouts", horizon, cfile + "horizon_length")
    take("train.ppo.learning_epochs", int(config["mini_epochs"]), cfile + "mini_epochs")
    envs = int(num_envs) if num_envs is not None else upstream_envs
    if "minibatch_size" in config:
        size = int(config["minibatch_size"])
        batch = envs * horizon
        wanted = max(1, batch // size)
        mini_batches = max(d for d in range(1, wanted + 1) if batch % d == 0)
        take(
            "train.ppo.mini_batches",
            mini_batches,
            cfile + f"minibatch_size ({size}): {envs} envs * {horizon} steps / {size}",
        )
    take("train.ppo.discount_factor", float(config["gamma"]), cfile + "gamma")
    take("train.ppo.gae_lambda", float(config["tau"]), cfile + "tau")
    take("train.ppo.learning_rate", float(config["learning_rate"]), cfile + "learning_rate")
    schedule = config.get("lr_schedule")
    if schedule == "adaptive":
        take("train.ppo.learning_rate_schedule", "kl_adaptive", cfile + "lr_schedule")
        take("train.ppo.desired_kl", float(config["kl_threshold"]), cfile + "kl_threshold")
        take("train.ppo.max_learning_rate", 1e-2, cfile + "lr_schedule (rl_games' AdaptiveScheduler: max_lr 1e-2)")
    elif schedule in (None, "fixed", "None", "linear"):
        take("train.ppo.learning_rate_schedule", "fixed", cfile + f"lr_schedule ({schedule})")
    # rl_games' LinearScheduler takes the rate from learning_rate to min_lr (1e-6) over max_epochs: our anneal
    take("train.ppo.learning_rate_anneal", schedule == "linear", cfile + f"lr_schedule ({schedule})")
    e_clip = float(config["e_clip"])
    take("train.ppo.ratio_clip", e_clip, cfile + "e_clip")
    if "clip_value" in config:
        take("train.ppo.value_clip", e_clip if config["clip_value"] else 0.0, cfile + "clip_value (uses e_clip)")
    take("train.ppo.entropy_loss_scale", float(config.get("entropy_coef", 0.0)), cfile + "entropy_coef")
    take("train.ppo.bounds_loss_scale", float(config.get("bounds_loss_coef") or 0.0), cfile + "bounds_loss_coef")
    # rl_games: loss = a_loss + 0.5 * critic_coef * c_loss; skrl: value_loss_scale * c_loss
    take("train.ppo.value_loss_scale", 0.5 * float(config.get("critic_coef", 1.0)), cfile + "critic_coef / 2")
    if "grad_norm" in config:
        clip = float(config["grad_norm"]) if config.get("truncate_grads", False) else 0.0
        take("train.ppo.grad_norm_clip", clip, cfile + "grad_norm (truncate_grads)")
    if "normalize_input" in config:
        take("train.ppo.observation_normalization", bool(config["normalize_input"]), cfile + "normalize_input")
    if "normalize_value" in config:
        take("train.ppo.value_normalization", bool(config["normalize_value"]), cfile + "normalize_value")
    if "value_bootstrap" in config:
        take("train.ppo.time_limit_bootstrap", bool(config["value_bootstrap"]), cfile + "value_bootstrap")
    scale = (config.get("reward_shaper", {}) or {}).get("scale_value")
    if scale is not None:
        take("train.ppo.rewards_scale", float(scale), cfile + "reward_shaper.scale_value")
    if config.get("max_epochs") not in (None, ""):
        take("train.max_iterations", int(config["max_epochs"]), cfile + "max_epochs")
    return out
