"""Every setting of omni-sfp, defined once: its key, type, default, range or choices, and one line of doc.

The rest is derived from this table or tested against it (tests/test_schema.py fails on any difference):

- ``cfg/config.yaml`` and ``cfg/train/PPO.yaml`` are written from it; ``cfg/train/<Task>PPO.yaml`` inherits
  PPO.yaml through Hydra's defaults list and holds only what that task changes;
- :func:`omni_sfp.run.compose.validate` checks every key's type and range with :meth:`Setting.problem`;
- the panel's toggles (:data:`omni_sfp.config.toggles.TOGGLES`) take their type, default, range and choices
  from it;
- the Kit manifest's ``[settings]`` block (extension.toml) and the README's configuration table are written
  from it.

After editing the table, regenerate those files (:mod:`omni_sfp.config.generated`) with ``python -m omni_sfp.schema --write`` (``--check`` says
which are stale). Standard library only: the Kit extension and the panel import it without torch, skrl or Hydra.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value or override; the message names the key, the value and what is allowed."""


def config_dir() -> Path:
    """cfg/ (Hydra's config folder) inside the installed package, or at the root of a source checkout."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "cfg"
    return installed if (installed / "config.yaml").is_file() else package.parent / "cfg"


CACHE_CHECKS: tuple[str, ...] = ("identity", "content", "auto", "off")
CHECK_FINITE: tuple[str, ...] = ("raise", "skip", "off")
LR_SCHEDULES: tuple[str, ...] = ("kl_adaptive", "fixed")
INITS: tuple[str, ...] = ("orthogonal", "torch", "torch_zero_bias")
# CPU speed choices (train.kernels.*): "auto" takes omni_sfp.compute.cpu_choices' measurement on this CPU kind, the
# others force a side. The ELU's sides are omni_sfp.compute.kernels.ELU_KERNELS; the allocator's are glibc's defaults
# or omni_sfp.compute.device.keep_freed_memory.
ELU_CHOICES: tuple[str, ...] = ("auto", "torch", "fast")
ALLOCATOR_CHOICES: tuple[str, ...] = ("auto", "keep_freed", "glibc")
# activation name -> the torch.nn class that omni_sfp.sfp.network builds for it
ACTIVATIONS: dict[str, str] = {
    "elu": "ELU",
    "relu": "ReLU",
    "tanh": "Tanh",
    "leaky_relu": "LeakyReLU",
    "selu": "SELU",
    "silu": "SiLU",
    "gelu": "GELU",
}
DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
DEVICE_GRAMMAR = "auto, cpu, cuda or cuda:N"
SEED_MAX = 2**31 - 1  # numpy's legacy seeding takes 32 bits; skrl adds the rank
RANDOM_SEED = -1  # seed=-1: draw a seed at start (OmniIsaacGymEnvs and Isaac Lab)
PRESET_NAME = r"[A-Za-z0-9_.\-]+"  # an Isaac Lab preset name (its PresetCfg field names)
PRESET_NAMES = rf"{PRESET_NAME}(,{PRESET_NAME})*"
PRESET_TOKENS = ("presets", "physics", "renderer")  # Isaac Lab 3's selector tokens, top-level keys here


def parse_device(text: str) -> tuple[str, int | None]:
    """``device`` (:data:`DEVICE_GRAMMAR`) as ``(kind, index)``: ``("auto", None)``, ``("cpu", None)``,
    ``("cuda", None)`` or ``("cuda", N)``. The one parser of the grammar: validation, the runner's
    :func:`omni_sfp.compute.device.resolve_device` and the simulator adapters all read a device through it.

    :raises ValueError: anything else, in one line naming the grammar.
    """
    if not re.fullmatch(DEVICE_PATTERN, text):
        raise ValueError(f"device={text!r}: expected {DEVICE_GRAMMAR}")
    kind, _, index = text.partition(":")
    return kind, int(index) if index else None


AUTO = "auto"  # the one string a "bool_auto" setting takes besides true and false
# "bool_auto": true, false or "auto"; "mapping": a nested config (a network spec), checked by its own parser
KINDS = ("bool", "bool_auto", "int", "float", "str", "ints", "mapping")
_TYPE_NAMES = {
    "bool": "bool",
    "bool_auto": "true, false or auto",
    "int": "int",
    "float": "float",
    "str": "str",
    "ints": "list",
    "mapping": "mapping",
}


@dataclass(frozen=True)
class Setting:
    """One configuration key. Bounds are inclusive (``minimum``/``maximum``) or exclusive (``above``)."""

    key: str  # dotted Hydra key, e.g. "train.ppo.learning_rate"
    kind: str  # one of KINDS; "ints" is a non-empty list of integers
    default: Any
    doc: str  # one line: what it does, with its unit
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    choices: tuple[str, ...] | None = None
    pattern: str | None = None  # a str must match it whole; `grammar` says it in words
    grammar: str | None = None
    nullable: bool = False  # null means "the task's (or the train file's) value"

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.problem(self.default) is None, (self.key, self.default, self.problem(self.default))

    def type_problem(self, value: Any) -> str | None:
        """``"expected int or null"`` when ``value`` has the wrong type, else None."""
        if value is None and self.nullable:
            return None
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "bool_auto":  # any value: problem() names the three allowed ones
            ok = value is not None
        elif self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif self.kind == "str":
            ok = isinstance(value, str)
        elif self.kind == "mapping":
            ok = hasattr(value, "keys") and hasattr(value, "items")  # a dict or an OmegaConf DictConfig
        else:
            ok = isinstance(value, (list, tuple))
        return None if ok else f"expected {_TYPE_NAMES[self.kind]}{' or null' if self.nullable else ''}"

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (``"must be >= 1"``, ...), or None when it is allowed."""
        wrong_type = self.type_problem(value)
        if wrong_type is not None or value is None:
            return wrong_type
        if self.kind == "bool_auto":
            return None if isinstance(value, bool) or value == AUTO else f"must be {self._allowed()}"
        if self.kind == "ints":
            if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
                return "must be a non-empty list of positive integers, e.g. [256,128,64]"
            return None
        if self.kind == "float" and not math.isfinite(value):
            return "must be finite"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return f"must be {self.grammar}"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {_number(self.minimum)}"
        if self.above is not None and value <= self.above:
            return f"must be > {_number(self.above)}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {_number(self.maximum)}"
        return None

    def allowed(self) -> str:
        """The allowed values in words, e.g. ``"an integer >= 1"`` (the panel's and the README's wording)."""
        return self._allowed() + (" or null" if self.nullable else "")

    def _allowed(self) -> str:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "bool_auto":
            return f"true, false or {AUTO}"
        if self.kind == "ints":
            return "a non-empty list of integers >= 1"
        if self.kind == "mapping":
            return "a mapping"
        if self.choices is not None:
            return f"one of {', '.join(self.choices)}"
        if self.grammar is not None:
            return self.grammar
        if self.kind == "str":
            return "a string"
        noun = "an integer" if self.kind == "int" else "a number"
        bounds = []
        if self.minimum is not None:
            bounds.append(f">= {_number(self.minimum)}")
        if self.above is not None:
            bounds.append(f"> {_number(self.above)}")
        if self.maximum is not None:
            bounds.append(f"<= {_number(self.maximum)}")
        return noun + (" " + " and ".join(bounds) if bounds else "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _s(key: str, kind: str, default: Any, doc: str, **limits: Any) -> Setting:
    return Setting(key, kind, default, doc, **limits)


# ---- the table ----------------------------------------------------------------------------------------------
# cfg/config.yaml: the run. `task` selects the Hydra groups task/<name>.yaml and train/<name>PPO.yaml.
TOP: tuple[Setting, ...] = (
    _s(
        "task",
        "str",
        "Cartpole",
        "task name from the registry (Cartpole, LQR60x8, ConstantCost, OmniIsaacGymEnvs and Isaac Lab names, gym:<Id>)",
        pattern=r"\S+",
        grammar="a task name without spaces (see omni_sfp.envs.registry.list_tasks())",
    ),
    _s("experiment", "str", "", "suffix of the run folder runs/<task>/<timestamp>_<experiment>"),
    _s(
        "num_envs",
        "int",
        None,
        "environments simulated together; null: the task's task.env.num_envs",
        minimum=1,
        nullable=True,
    ),
    _s(
        "seed",
        "int",
        42,
        "seeds torch, numpy, random and the task's generator; -1 draws one (printed, and saved "
        "in the run folder's config.yaml)",
        minimum=RANDOM_SEED,
        maximum=SEED_MAX,
    ),
    # Isaac Lab 3's selector tokens (isaaclab_tasks/utils/preset_cli.py), applied as its parse_env_cfg(overrides=)
    _s(
        "presets",
        "str",
        None,
        "Isaac Lab tasks: presets=NAME[,NAME] picks the task's named config alternatives, as Isaac Lab's own "
        "token (its env config and, where the task registers a family, its skrl network and agent settings); "
        "python -m omni_sfp.list_tasks lists each task's names; null: the task's defaults",
        pattern=PRESET_NAMES,
        grammar="NAME[,NAME...] (letters, digits, _ - .)",
        nullable=True,
    ),
    _s(
        "physics",
        "str",
        None,
        "Isaac Lab tasks: physics=NAME picks the physics backend preset (newton_mjwarp, physx, ...), as Isaac Lab's "
        "own token; null: the task's default (Newton outside Kit)",
        pattern=PRESET_NAME,
        grammar="one preset name (letters, digits, _ - .)",
        nullable=True,
    ),
    _s(
        "renderer",
        "str",
        None,
        "Isaac Lab tasks: renderer=NAME picks the camera renderer preset (newton_renderer, rtx, ...), as Isaac "
        "Lab's own token; null: the task's default",
        pattern=PRESET_NAME,
        grammar="one preset name (letters, digits, _ - .)",
        nullable=True,
    ),
    _s("torch_deterministic", "bool", False, "torch.use_deterministic_algorithms(True): reproducible, slower on CUDA"),
    _s(
        "device",
        "str",
        "auto",
        "where the networks (and GPU-resident tasks) run: auto is CUDA when present, else CPU",
        pattern=DEVICE_PATTERN,
        grammar=DEVICE_GRAMMAR,
    ),
    _s("headless", "bool", True, "simulator tasks draw no viewport"),
    _s(
        "max_iterations",
        "int",
        None,
        "PPO iterations (rollout + update); null: train.max_iterations",
        minimum=1,
        nullable=True,
    ),
    _s("checkpoint", "str", "", "checkpoint file or run folder to resume from, or to play with test=true"),
    _s("test", "bool", False, "play the checkpoint with deterministic actions and print the mean return"),
    _s("test_episodes", "int", 1, "with test=true: episodes per environment to average over", minimum=1),
    _s(
        "test_checkpoint",
        "str",
        "last",
        "with test=true and a run folder as checkpoint: play its last.pt (where training ended) or best.pt (the "
        "policy of the best training iteration; a run that lost what it learned says so at its end)",
        choices=("last", "best"),
    ),
    _s("resume", "bool", False, "with checkpoint=<run folder>: continue its newest checkpoint in the same folder"),
    _s("runs_dir", "str", "runs", "where run folders are created (relative to the working directory)"),
    _s(
        "progress_file",
        "str",
        None,
        "also append one JSON line per iteration here (the Kit panel reads it), and at the end one with the final "
        "return and whether it kept what training reached",
        nullable=True,
    ),
    # outputs beyond checkpoints (Isaac Lab's --video flags, its play.py export, OmniIsaacGymEnvs' wandb_* keys)
    _s(
        "video",
        "bool",
        False,
        "record clips of env 0 (Cartpole, gym:<Id>, Isaac Lab with cameras): training into "
        "<run>/videos/train, test=true into videos/play of the checkpoint's run folder",
    ),
    _s("video_length", "int", 200, "steps per clip (Isaac Lab's --video_length)", minimum=1),
    _s(
        "video_interval",
        "int",
        2000,
        "training: a clip starts every this many steps (Isaac Lab's --video_interval); "
        "test=true: one clip from the start",
        minimum=1,
    ),
    _s(
        "export",
        "bool",
        False,
        "write exported/policy.pt (TorchScript) and policy.onnx, normaliser folded in, mean "
        "actions clipped as the task clips them: after training, or at test=true next to the checkpoint",
    ),
    _s(
        "wandb_activate",
        "bool",
        False,
        "log the config and every TensorBoard scalar to Weights & Biases "
        "(pip install omni-sfp[wandb]; WANDB_MODE=offline needs no network)",
    ),
    _s("wandb_project", "str", "omni_sfp", "W&B project (not empty when wandb_activate=true)"),
    _s("wandb_entity", "str", "", "W&B entity (team or user); empty: your default"),
    _s("wandb_group", "str", "", "W&B run group; empty: none"),
    _s("wandb_name", "str", "", "W&B run name; empty: the run folder's name"),
)

# cfg/train/PPO.yaml (keys under `train.`): the base every cfg/train/<Task>PPO.yaml inherits. Keys mirror
# skrl 2's PPO_CFG where they have a counterpart (ppo.*).
TRAIN: tuple[Setting, ...] = (
    _s(
        "train.max_iterations",
        "int",
        50,
        "PPO iterations for this task; env steps = max_iterations * ppo.rollouts * num_envs",
        minimum=1,
    ),
    _s(
        "train.mixed_precision",
        "bool",
        False,
        "autocast: bf16 on CPU (fast only with bf16 instructions), fp16 + GradScaler on CUDA",
    ),
    _s("train.sfp.enabled", "bool", True, "single forward pass: the shared trunk runs once per policy+value pair"),
    _s(
        "train.sfp.cache_check",
        "str",
        "auto",
        "what counts as the same input (README: how the cache decides a hit); off: the double-pass baseline",
        choices=CACHE_CHECKS,
    ),
    _s("train.models.separate", "bool", False, "separate actor and critic networks (no sharing, no cache)"),
    _s("train.models.units", "ints", [256, 128, 64], "hidden layer sizes of the trunk (of each network when separate)"),
    _s("train.models.activation", "str", "elu", "activation after each hidden layer", choices=tuple(ACTIVATIONS)),
    _s(
        "train.models.init",
        "str",
        "orthogonal",
        "weight init: orthogonal (gain sqrt 2, policy head 0.01, value head "
        "1), torch (nn.Linear's default, as skrl's model instantiators) or torch_zero_bias (rl_games' default "
        "initializer)",
        choices=INITS,
    ),
    _s("train.models.initial_log_std", "float", 0.0, "initial log standard deviation of the Gaussian policy"),
    _s(
        "train.models.network",
        "mapping",
        None,
        "the network in skrl's YAML model format (policy/value: class, network containers, output; "
        "omni_sfp/sfp/network.py), plus our rnn block for a recurrent trunk shared by both roles (class LSTM|GRU, "
        "hidden_size, num_layers, sequence_length, before_mlp, concat_input, layer_norm: rl_games' rnn semantics, "
        "trained as skrl's PPO_RNN; omni_sfp/sfp/recurrent.py); null: from the task's space (an MLP of units on a flat Box, a small CNN then the MLP "
        "on images, a Categorical / MultiCategorical policy for Discrete / MultiDiscrete actions). Isaac Lab and "
        "OmniIsaacGymEnvs tasks set it from the network their library registered, unless it is a plain MLP",
        nullable=True,
    ),
    _s(
        "train.models.compile",
        "bool_auto",
        AUTO,
        "torch.compile the trunk (inductor; needs a C++ compiler on CPU): "
        "true before training, auto after 2 eager iterations when the run is long enough to pay the compile back "
        "(the decision is printed; omni_sfp/compute/compile_policy.py)",
    ),
    _s(
        "train.capture",
        "bool_auto",
        AUTO,
        "the PPO minibatch step (both roles' forward, losses, backward, clip, fused Adam) through torch.compile as "
        "one graph, and on CUDA replayed from a CUDA graph: no host work per minibatch. auto: after 2 eager "
        "iterations, captured when the run is long enough to pay the compile back, kept only when measured faster; "
        "the decision is printed and written to the run's config.yaml (omni_sfp/compute/compile_policy.py)",
    ),
    _s(
        "train.kernels.elu_no_grad",
        "str",
        AUTO,
        "CPU float32 ELU without autograd (rollout, evaluation): torch's F.elu, fast (max(x, exp(min(x,0)) - 1), "
        "within 2**-23), or auto: measured once per CPU kind (omni_sfp/compute/cpu_choices.py; printed at start)",
        choices=ELU_CHOICES,
    ),
    _s(
        "train.kernels.elu_autograd",
        "str",
        AUTO,
        "the same choice for the ELU with autograd (the update's minibatches)",
        choices=ELU_CHOICES,
    ),
    _s(
        "train.kernels.allocator",
        "str",
        AUTO,
        "CPU: keep_freed (glibc mallopt: freed memory is reused, not faulted back in), glibc (its defaults), or "
        "auto: measured once per CPU kind",
        choices=ALLOCATOR_CHOICES,
    ),
    _s(
        "train.kernels.threads",
        "int",
        0,
        "CPU: torch threads; 0: auto, torch's default unless half as many is measured clearly faster",
        minimum=0,
    ),
    _s(
        "train.ppo.rollouts",
        "int",
        64,
        "env steps per environment between updates (the horizon): what the advantages see before they lean on "
        "the value function",
        minimum=1,
    ),
    _s("train.ppo.learning_epochs", "int", 4, "passes over the rollout per update", minimum=1),
    _s(
        "train.ppo.mini_batches",
        "int",
        4,
        "minibatches per epoch; num_envs * rollouts must be divisible by it",
        minimum=1,
    ),
    _s("train.ppo.discount_factor", "float", 0.99, "gamma", minimum=0, maximum=1),
    _s("train.ppo.gae_lambda", "float", 0.95, "GAE lambda", minimum=0, maximum=1),
    _s(
        "train.ppo.learning_rate",
        "float",
        3.0e-4,
        "Adam learning rate (the initial one when the schedule adapts it)",
        above=0,
    ),
    _s(
        "train.ppo.learning_rate_schedule",
        "str",
        "kl_adaptive",
        "kl_adaptive (skrl's KLAdaptiveLR) or fixed",
        choices=LR_SCHEDULES,
    ),
    _s(
        "train.ppo.max_learning_rate",
        "float",
        1.0e-3,
        "upper bound of the kl_adaptive schedule's learning rate (skrl's KLAdaptiveLR max_lr)",
        above=0,
    ),
    _s(
        "train.ppo.learning_rate_anneal",
        "bool",
        True,
        "the learning rate (kl_adaptive: its upper bound) falls linearly to 0 over the run, as openai/baselines' "
        "PPO: the last updates settle the policy that the deterministic evaluation runs, instead of moving it",
    ),
    _s("train.ppo.desired_kl", "float", 0.008, "target KL of the kl_adaptive schedule (> 0 with it)", minimum=0),
    _s("train.ppo.kl_threshold", "float", 0.0, "early-stop an epoch when the KL exceeds this; 0 disables", minimum=0),
    _s("train.ppo.ratio_clip", "float", 0.2, "PPO surrogate clip", above=0),
    _s("train.ppo.value_clip", "float", 0.0, "value prediction clip around the rollout value; 0 disables", minimum=0),
    _s("train.ppo.entropy_loss_scale", "float", 0.0, "entropy bonus weight"),
    _s("train.ppo.value_loss_scale", "float", 2.0, "value loss weight", minimum=0),
    _s("train.ppo.grad_norm_clip", "float", 1.0, "global gradient norm clip; 0 disables", minimum=0),
    _s(
        "train.ppo.bounds_loss_scale",
        "float",
        1.0e-4,
        "weight of rl_games' bound loss: the squared excess of the "
        "policy mean beyond 1.1x the action bounds (0: none, as skrl's PPO)",
        minimum=0,
    ),
    _s(
        "train.ppo.fused_optimizer",
        "bool_auto",
        AUTO,
        "fused Adam: the same update in one kernel; false: skrl's default Adam; auto: fused, unless measured "
        "clearly slower on this CPU kind (omni_sfp/compute/cpu_choices.py)",
    ),
    _s(
        "train.ppo.time_limit_bootstrap",
        "bool",
        True,
        "bootstrap truncated episodes with the value of the episode's final observation where the env reports it "
        "(embedded tasks, Gymnasium, OmniIsaacGymEnvs), else with the current step's value (Isaac Lab)",
    ),
    _s(
        "train.ppo.observation_normalization",
        "bool_auto",
        AUTO,
        "running mean/std of observations and of a critic's states (skrl RunningStandardScaler); auto: on, "
        "except for image observations (pixels are in scale already; Isaac Lab's camera configs set none)",
    ),
    _s("train.ppo.value_normalization", "bool", True, "running mean/std of values and returns"),
    _s(
        "train.ppo.rewards_scale",
        "float",
        0.1,
        "rewards are multiplied by this for learning (reported returns are unscaled)",
        above=0,
    ),
    _s(
        "train.checkpoint_interval",
        "int",
        25,
        "iterations between checkpoints (plus one at the end); 0: only at the end",
        minimum=0,
    ),
    _s(
        "train.keep_checkpoints",
        "int",
        3,
        "newest iter_<n>.pt kept in the run folder, besides best.pt and last.pt",
        minimum=1,
    ),
    _s(
        "train.check_finite",
        "str",
        "raise",
        "non-finite observations, rewards or losses: raise (stop, naming "
        "the step and env), skip the update (counted), or off",
        choices=CHECK_FINITE,
    ),
)

# Kit launcher settings: carb /exts/omni.sfp/<key> only, never a Hydra override.
LAUNCHER: tuple[Setting, ...] = (
    _s("python_exe", "str", "", "interpreter that runs the runner ('' = detect; in Isaac Sim, python.sh)"),
)

SETTINGS: tuple[Setting, ...] = TOP + TRAIN
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS + LAUNCHER}


def setting(key: str) -> Setting:
    return BY_KEY[key]


# ---- generated files ------------------------------------------------------------------------------------------
