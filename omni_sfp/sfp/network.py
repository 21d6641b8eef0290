"""Networks as specs: every network omni_sfp trains, our tuned MLP among them, is a spec built by one code path.

One spec format, skrl's YAML model format (the one Isaac Lab registers under ``skrl_cfg_entry_point``)::

    separate: false
    policy: {class: GaussianMixin | CategoricalMixin | MultiCategoricalMixin, network: [...], output: ACTIONS}
    value:  {class: DeterministicMixin, network: [...], output: ONE}

where each ``network`` entry is a container ``{name, input, layers, activations}``. :func:`from_rlgames` writes
rl_games' ``network`` block (OmniIsaacGymEnvs) in it, :func:`mlp_spec` our tuned MLP, and :func:`default_spec` our
network for a Gymnasium id, chosen by space. :class:`Trunk` builds a role's containers (the one place a layer kind
or an input kind is added); the skrl models here and in :mod:`omni_sfp.sfp.recurrent` put trunks and heads
together, and :func:`omni_sfp.sfp.models.build_models` picks the model for a spec.

Semantics follow skrl 2.1.1's model instantiators (``skrl/utils/model_instantiators/torch/common.py``): an integer
layer is a linear layer, ``flatten`` a flatten layer, ``{conv2d: {...}}`` a 2D convolution; the activations go
after every layer but ``flatten`` (one name for all, or one per layer); inputs are expressions over
``OBSERVATIONS``, ``STATES``, earlier containers, ``concatenate([...])``, ``permute(x, dims)``,
``one_hot_encoding(SPACE, x)``, indexing (``OBSERVATIONS["camera"]``, ``OBSERVATIONS[0]``) and ``+ - * /``;
``output`` is ``ACTIONS`` or ``ONE`` (a linear head), optionally wrapped in an activation (``tanh(ACTIONS)``).
Expressions are parsed once into a small tree of allowed operations: nothing is executed from a string.

Weights (``train.models.init``): ``orthogonal`` gives every hidden layer orthogonal weights of gain sqrt(2), the
policy head 0.01 and the value head 1, zero biases (PPO practice); ``torch`` keeps torch's default (skrl's
instantiators); ``torch_zero_bias`` zeroes its biases (rl_games' ``initializer: default``).

Sharing: with ``separate: false`` the containers that both roles define identically, on the same input, form
one trunk that runs through :class:`~omni_sfp.sfp.cache.SingleForwardPass` (skrl's shared model reuses the
policy's containers for the value whatever the value's spec says; here a differing value network, such as a
critic on ``STATES``, gets its own trunk, and nothing of it is counted as shareable).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import torch
from gymnasium import spaces
from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model, MultiCategoricalMixin
from skrl.utils.spaces.torch import unflatten_tensorized_space
from torch import nn

from omni_sfp.compute.kernels import ELU
from omni_sfp.config import schema
from omni_sfp.config.schema import ConfigError
from omni_sfp.sfp.cache import SFPStats, SingleForwardPass, clear_caches, collect_stats, sfp_modules

POLICY_CLASSES = ("GaussianMixin", "CategoricalMixin", "MultiCategoricalMixin")
VALUE_CLASSES = ("DeterministicMixin",)
SOURCES = {"OBSERVATIONS": "observations", "STATES": "states"}  # spec name -> skrl's inputs key
_SPACES = {"OBSERVATION_SPACE": "observations", "STATE_SPACE": "states"}


class NetworkSpecError(ConfigError):
    """A network spec cannot be built; one line naming the role, the container and what is wrong."""


# -- the spec -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    kind: str  # "linear", "conv2d" or "flatten"
    options: tuple[tuple[str, Any], ...]  # keyword arguments: out_features / out_channels, kernel_size, ...
    activation: str | None


@dataclass(frozen=True)
class Container:
    name: str
    input: str  # the expression as written (parsed by _Expression)
    layers: tuple[Layer, ...]


@dataclass(frozen=True)
class Role:
    cls: str  # one of POLICY_CLASSES or VALUE_CLASSES
    network: tuple[Container, ...]
    output: str  # "ACTIONS" or "ONE", possibly in an activation: "tanh(ACTIONS)"
    options: tuple[tuple[str, Any], ...]  # the mixin's keywords: clip_actions, initial_log_std, ...

    def option(self, key: str, default: Any) -> Any:
        return dict(self.options).get(key, default)


RNN_CLASSES = ("LSTM", "GRU")
_RNN_KEYS = ("class", "hidden_size", "num_layers", "sequence_length", "before_mlp", "concat_input", "layer_norm")


@dataclass(frozen=True)
class RnnSpec:
    """The ``rnn`` block: a recurrent layer in the shared trunk (:mod:`omni_sfp.sfp.recurrent` builds it)."""

    cls: str = "LSTM"
    hidden_size: int = 64
    num_layers: int = 1
    sequence_length: int = 16  # steps per training sequence (skrl's sequence_length, rl_games' seq_length)
    before_mlp: bool = True
    concat_input: bool = False
    layer_norm: bool = False

    @property
    def states(self) -> int:
        """Hidden-state tensors: 2 for an LSTM (h, c), 1 for a GRU."""
        return 2 if self.cls == "LSTM" else 1


def parse_rnn(block: Any, where: str = "train.models.network.rnn") -> RnnSpec:
    """The ``rnn`` block as an :class:`RnnSpec`.

    :raises NetworkSpecError: an unknown key or class, or a size below 1 (one line naming it).
    """
    if not isinstance(block, Mapping):
        raise NetworkSpecError(f"{where}: expected a mapping ({', '.join(_RNN_KEYS)}), got {type(block).__name__}")
    unknown = sorted(set(block) - set(_RNN_KEYS))
    if unknown:
        raise NetworkSpecError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(_RNN_KEYS)}")
    cls = str(block.get("class", "LSTM")).upper()
    if cls not in RNN_CLASSES:
        raise NetworkSpecError(f"{where}.class: {block.get('class')!r} is not one of {', '.join(RNN_CLASSES)}")
    values = {}
    for key in ("hidden_size", "num_layers", "sequence_length"):
        value = block.get(key, getattr(RnnSpec, key))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NetworkSpecError(f"{where}.{key}: {value!r} is not a positive integer")
        values[key] = value
    flags = {key: bool(block.get(key, getattr(RnnSpec, key))) for key in ("before_mlp", "concat_input", "layer_norm")}
    return RnnSpec(cls=cls, **values, **flags)


@dataclass(frozen=True)
class NetworkSpec:
    separate: bool
    policy: Role
    value: Role
    rnn: RnnSpec | None = None  # a recurrent trunk (omni_sfp.sfp.recurrent), None: feed-forward


_MIXIN_OPTIONS = {
    "GaussianMixin": ("clip_actions", "clip_mean_actions", "clip_log_std", "min_log_std", "max_log_std", "reduction"),
    "CategoricalMixin": ("unnormalized_log_prob",),
    "MultiCategoricalMixin": ("unnormalized_log_prob", "reduction"),
    "DeterministicMixin": ("clip_actions",),
}
_ROLE_KEYS = {"class", "network", "output", "initial_log_std", "fixed_log_std"}


def parse(models: Mapping[str, Any], *, source: str = "train.models.network") -> NetworkSpec:
    """A skrl YAML ``models`` mapping as a :class:`NetworkSpec`.

    :raises NetworkSpecError: an unknown class, layer, activation or option (one line naming it).
    """
    if not isinstance(models, Mapping):
        raise NetworkSpecError(f"{source}: expected a mapping with 'policy' and 'value', got {type(models).__name__}")
    missing = [role for role in ("policy", "value") if role not in models]
    if missing:
        raise NetworkSpecError(f"{source}: no {' or '.join(missing)} model (omni_sfp trains PPO: policy and value)")
    roles = {name: _parse_role(models[name], f"{source}.{name}", name) for name in ("policy", "value")}
    rnn = parse_rnn(models["rnn"], f"{source}.rnn") if models.get("rnn") is not None else None
    return NetworkSpec(separate=bool(models.get("separate", False)), **roles, rnn=rnn)


def _parse_role(role: Mapping[str, Any], where: str, name: str) -> Role:
    cls = str(role.get("class", "GaussianMixin" if name == "policy" else "DeterministicMixin"))
    allowed = POLICY_CLASSES if name == "policy" else VALUE_CLASSES
    if cls not in allowed:
        raise NetworkSpecError(f"{where}.class: {cls!r} is not supported for the {name}; use {', '.join(allowed)}")
    network = role.get("network")
    if not network:
        raise NetworkSpecError(f"{where}.network: empty; give at least one container with input and layers")
    containers = tuple(_parse_container(item, f"{where}.network[{i}]") for i, item in enumerate(network))
    names = [c.name for c in containers]
    if len(set(names)) != len(names):
        raise NetworkSpecError(f"{where}.network: container names repeat ({', '.join(names)})")
    output = str(role.get("output", "ACTIONS" if name == "policy" else "ONE"))
    _output_head(output, where)  # checked now, built later
    options = {k: v for k, v in role.items() if k in _MIXIN_OPTIONS[cls] or k in ("initial_log_std", "fixed_log_std")}
    unknown = sorted(set(role) - _ROLE_KEYS - set(_MIXIN_OPTIONS[cls]))
    if unknown:
        raise NetworkSpecError(f"{where}: unknown key(s) {', '.join(unknown)} for {cls}")
    return Role(cls, containers, output, tuple(sorted(options.items())))


_CONV_KEYS = ("out_channels", "kernel_size", "stride", "padding", "bias")
_CONV_ALIASES = {"features": "out_channels", "strides": "stride", "use_bias": "bias"}


def _parse_container(item: Mapping[str, Any], where: str) -> Container:
    if not isinstance(item, Mapping) or "name" not in item or "input" not in item:
        raise NetworkSpecError(f"{where}: a container needs 'name', 'input' and 'layers'")
    layers = list(item.get("layers") or [])
    activations = item.get("activations", [])
    if isinstance(activations, str) or activations is None:
        activations = [activations] * len(layers)
    activations = list(activations)
    if len(activations) == 1:
        activations = activations * len(layers)
    if not activations:
        activations = [None] * len(layers)
    if len(activations) != len(layers):
        raise NetworkSpecError(f"{where}: {len(activations)} activations for {len(layers)} layers")
    parsed = []
    for layer, activation in zip(layers, activations):
        parsed.append(_parse_layer(layer, activation, where))
    name = str(item["name"])
    if name in SOURCES or name in _SPACES or not name.isidentifier():
        raise NetworkSpecError(f"{where}: {name!r} cannot name a container")
    _Expression(str(item["input"]), where)  # syntax checked now
    return Container(name, str(item["input"]), tuple(parsed))


def _parse_layer(layer: Any, activation: Any, where: str) -> Layer:
    if activation is not None and activation != "" and str(activation).lower() not in ACTIVATION_MODULES:
        raise NetworkSpecError(f"{where}: activation {activation!r} is not one of {', '.join(ACTIVATION_MODULES)}")
    activation = str(activation).lower() if activation else None
    if isinstance(layer, bool):
        raise NetworkSpecError(f"{where}: layer {layer!r} is not a layer")
    if isinstance(layer, int | float):
        if int(layer) < 1:
            raise NetworkSpecError(f"{where}: layer {layer!r}; a linear layer's size is a positive integer")
        return Layer("linear", (("out_features", int(layer)),), activation)
    if isinstance(layer, str):
        if layer.lower() != "flatten":
            raise NetworkSpecError(f"{where}: layer {layer!r}; the one layer named by a string is 'flatten'")
        return Layer("flatten", (), None)
    if not isinstance(layer, Mapping) or len(layer) != 1:
        raise NetworkSpecError(f"{where}: layer {layer!r} is not an integer, 'flatten' or {{kind: options}}")
    kind, options = next(iter(layer.items()))
    kind = str(kind).lower()
    if kind == "linear":
        if isinstance(options, int | float):
            options = {"out_features": int(options)}
        elif isinstance(options, Sequence):
            options = dict(zip(("out_features", "bias"), options))
        elif isinstance(options, Mapping):
            options = {{"features": "out_features", "use_bias": "bias"}.get(k, k): v for k, v in options.items()}
        unknown = sorted(set(options) - {"out_features", "bias", "in_features"})
        if unknown or "out_features" not in options:
            raise NetworkSpecError(f"{where}: linear layer {dict(options)!r} needs out_features (and maybe bias)")
        options.pop("in_features", None)  # inferred from the input, as skrl's LazyLinear does
        return Layer("linear", tuple(sorted(options.items())), activation)
    if kind == "conv2d":
        if isinstance(options, Sequence) and not isinstance(options, str):
            options = dict(zip(_CONV_KEYS, options))
        elif isinstance(options, Mapping):
            options = {_CONV_ALIASES.get(k, k): v for k, v in options.items()}
        else:
            raise NetworkSpecError(f"{where}: conv2d layer {options!r} is not a list or a mapping")
        options.pop("in_channels", None)
        unknown = sorted(set(options) - set(_CONV_KEYS))
        if unknown or "out_channels" not in options or "kernel_size" not in options:
            raise NetworkSpecError(f"{where}: conv2d layer {dict(options)!r} needs out_channels and kernel_size")
        options = {k: (tuple(v) if isinstance(v, list) else v) for k, v in options.items()}
        return Layer("conv2d", tuple(sorted(options.items())), activation)
    if kind == "flatten":
        options = dict(zip(("start_dim", "end_dim"), options)) if isinstance(options, Sequence) else dict(options or {})
        return Layer("flatten", tuple(sorted(options.items())), None)
    raise NetworkSpecError(f"{where}: layer kind {kind!r} is not one of linear, conv2d, flatten")


_SKRL_LOG_STD_BOUNDS = {"min_log_std": -20.0, "max_log_std": 2.0}  # GaussianMixin's defaults, as the MLP models'


def plain_mlp(spec: NetworkSpec) -> tuple[list[int], str] | None:
    """``(units, activation)`` when ``spec`` is :func:`mlp_spec`'s network: one MLP container on ``OBSERVATIONS``
    per role, the same for both, a Gaussian policy with skrl's default options and linear heads; None otherwise.
    A registered network of this shape is set as ``train.models.units`` and ``activation`` (which a sweep can vary)."""
    for role in (spec.policy, spec.value):
        if len(role.network) != 1 or role.network[0].input.strip() != "OBSERVATIONS":
            return None
        if role.output not in ("ACTIONS", "ONE"):
            return None
    if spec.policy.cls != "GaussianMixin" or spec.policy.network[0].layers != spec.value.network[0].layers:
        return None
    if {k for k, _ in spec.policy.options} - {"initial_log_std", "clip_actions", "clip_log_std", *_SKRL_LOG_STD_BOUNDS}:
        return None
    if spec.policy.option("clip_actions", False) or spec.policy.option("fixed_log_std", False):
        return None
    if not spec.policy.option("clip_log_std", True) or any(  # Isaac Lab 3's configs spell skrl's defaults out
        float(spec.policy.option(key, default)) != default for key, default in _SKRL_LOG_STD_BOUNDS.items()
    ):
        return None
    layers = spec.policy.network[0].layers
    activations = {layer.activation for layer in layers}
    if not layers or any(
        layer.kind != "linear" or dict(layer.options).get("bias", True) is not True for layer in layers
    ):
        return None
    if len(activations) != 1 or None in activations:
        return None
    return [int(dict(layer.options)["out_features"]) for layer in layers], activations.pop()


def summary(spec: NetworkSpec) -> str:
    """The spec in one line, e.g. ``policy GaussianMixin, value DeterministicMixin: features_extractor
    [conv2d 32/8/4, ..., flatten] -> net [512] on OBSERVATIONS``."""

    def layer(item: Layer) -> str:
        options = dict(item.options)
        if item.kind == "linear":
            return str(options["out_features"])
        if item.kind == "conv2d":
            return f"conv2d {options['out_channels']}/{options['kernel_size']}/{options.get('stride', 1)}"
        return "flatten"

    def network(role: Role) -> str:
        return " -> ".join(f"{c.name}({c.input.strip()}) [{', '.join(map(layer, c.layers))}]" for c in role.network)

    head = f"policy {spec.policy.cls}: {network(spec.policy)}"
    value = "the same network" if spec.value.network == spec.policy.network else network(spec.value)
    rnn = spec.rnn
    if rnn is not None:
        where = "before" if rnn.before_mlp else "after"
        head = f"{rnn.cls} {rnn.num_layers}x{rnn.hidden_size} (sequences of {rnn.sequence_length}) {where} the {head}"
    return f"{head}; value {spec.value.cls}: {value}"


# -- other sources written as a spec -------------------------------------------------------------------------


def _skrl_activation(name: Any) -> str | None:
    return None if name in (None, "", "None", "none") else str(name)


def from_rlgames(
    network: Mapping[str, Any], *, central_value: Mapping[str, Any] | None = None, seq_length: int | None = None
) -> dict[str, Any]:
    """rl_games' ``params.network`` block (``mlp``, ``cnn`` with ``convs``, ``rnn``, ``space.continuous`` /
    ``discrete`` / ``multi_discrete``) as a skrl ``models`` mapping; ``central_value``: the
    ``central_value_config.network`` of a separate critic on ``STATES``; ``seq_length``: rl_games'
    ``config.seq_length`` (its default, 4, when None), a recurrent network's training sequences.

    rl_games' A2C builder (``rl_games/algos_torch/network_builder.py``) runs ``cnn`` then flattens into ``mlp``,
    with ``cnn.permute_input`` (default true) turning NHWC images into NCHW first; both heads read the mlp's output.
    Its ``rnn`` block (``name: lstm | gru``, ``units``, ``layers``, ``before_mlp``, ``concat_input``, ``layer_norm``)
    becomes our ``rnn`` block (:class:`RnnSpec`).

    :raises NetworkSpecError: a recurrent critic on states, or a part omni_sfp does not build.
    """
    rnn = network.get("rnn")
    if central_value is not None and bool(central_value.get("rnn")) != bool(rnn):
        raise NetworkSpecError(
            "central_value_config.network.rnn: a recurrent critic on states goes with a recurrent policy, and a "
            "recurrent policy with a recurrent critic (one rnn block for both)"
        )
    if central_value is not None and rnn and _rnn_block(central_value["rnn"]) != _rnn_block(rnn):
        raise NetworkSpecError(
            "central_value_config.network.rnn: differs from params.network.rnn; omni_sfp builds both with one block"
        )
    space = network.get("space") or {}
    if "continuous" in space or not space:  # rl_games' A2C default: continuous
        policy_cls = "GaussianMixin"
    elif "discrete" in space:
        policy_cls = "CategoricalMixin"
    elif "multi_discrete" in space:
        policy_cls = "MultiCategoricalMixin"
    else:
        raise NetworkSpecError(f"params.network.space: expected continuous, discrete or multi_discrete, got {space!r}")
    containers = _rlgames_containers(network, "OBSERVATIONS", "params.network")
    policy: dict[str, Any] = {"class": policy_cls, "network": containers, "output": "ACTIONS"}
    if policy_cls == "GaussianMixin":
        continuous = space.get("continuous") or {}
        if not continuous.get("fixed_sigma", True):
            raise NetworkSpecError(
                "params.network.space.continuous.fixed_sigma: false (a state-dependent sigma) is not supported"
            )
        sigma = continuous.get("sigma_init") or {}
        if sigma.get("name") == "const_initializer":
            policy["initial_log_std"] = float(sigma.get("val", 0.0))
    value: dict[str, Any] = {"class": "DeterministicMixin", "network": containers, "output": "ONE"}
    if central_value is not None:
        value["network"] = _rlgames_containers(central_value, "STATES", "central_value_config.network")
    models = {"separate": bool(network.get("separate", False)), "policy": policy, "value": value}
    if rnn:
        models["rnn"] = {**_rnn_block(rnn), "sequence_length": int(seq_length or 4)}
    return models


def _rnn_block(rnn: Mapping[str, Any]) -> dict[str, Any]:
    """rl_games' ``rnn`` block as our ``rnn`` block, without the sequence length (rl_games' ``config.seq_length``)."""
    name = str(rnn.get("name", "lstm")).upper()
    if name not in RNN_CLASSES:
        raise NetworkSpecError(f"params.network.rnn.name: {rnn.get('name')!r} is not one of lstm, gru")
    return {
        "class": name,
        "hidden_size": int(rnn.get("units", 64)),
        "num_layers": int(rnn.get("layers", 1)),
        "before_mlp": bool(rnn.get("before_mlp", False)),
        "concat_input": bool(rnn.get("concat_input", False)),
        "layer_norm": bool(rnn.get("layer_norm", False)),
    }


def _rlgames_containers(network: Mapping[str, Any], source: str, where: str) -> list[dict[str, Any]]:
    containers = []
    cnn = network.get("cnn")
    if cnn:
        if cnn.get("type", "conv2d") != "conv2d":
            raise NetworkSpecError(f"{where}.cnn.type: {cnn.get('type')!r}; only conv2d is supported")
        layers: list[Any] = [
            {
                "conv2d": {
                    "out_channels": int(conv["filters"]),
                    "kernel_size": int(conv["kernel_size"]),
                    "stride": int(conv.get("strides", 1)),
                    "padding": int(conv.get("padding", 0)),
                }
            }
            for conv in cnn.get("convs") or []
        ]
        if not layers:
            raise NetworkSpecError(f"{where}.cnn.convs: empty")
        activation = _skrl_activation(cnn.get("activation", "relu"))
        image = f"permute({source}, (0, 3, 1, 2))" if cnn.get("permute_input", True) else source  # NHWC -> NCHW
        containers.append(
            {"name": "features_extractor", "input": image, "layers": [*layers, "flatten"], "activations": activation}
        )
        source = "features_extractor"
    mlp = network.get("mlp") or {}
    units = [int(u) for u in mlp.get("units") or []]
    if mlp.get("d2rl"):
        raise NetworkSpecError(f"{where}.mlp.d2rl: true is not supported")
    if units:
        containers.append(
            {
                "name": "net",
                "input": source,
                "layers": units,
                "activations": _skrl_activation(mlp.get("activation", "relu")),
            }
        )
    if not containers:
        raise NetworkSpecError(f"{where}: neither mlp.units nor cnn.convs")
    return containers


def image_layout(space: gymnasium.Space) -> str | None:
    """``"CHW"`` or ``"HWC"`` for an image ``Box`` (3 dimensions, channels first or last), else None."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3:
        return None
    channels_last = space.shape[-1] <= 4 < min(space.shape[:2])
    return "HWC" if channels_last else "CHW"


def default_spec(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    *,
    units: Sequence[int],
    activation: str,
    separate: bool,
    initial_log_std: float,
    task: str,
) -> dict[str, Any]:
    """Our network for a task that registered none, chosen by space: an MLP on a flat ``Box``, a small CNN (then the
    MLP) on an image ``Box``, one-hot codes of ``Discrete``/``MultiDiscrete`` observations, a ``Dict`` or ``Tuple``
    entry by entry (:func:`_input_containers`); a Gaussian policy for ``Box`` actions, Categorical for ``Discrete``,
    MultiCategorical for ``MultiDiscrete``. A flat ``Box`` in and out gets :func:`mlp_spec`'s network.

    :raises NetworkSpecError: any other space, in one line naming it.
    """
    if isinstance(action_space, spaces.Box):
        policy_cls = "GaussianMixin"
    elif isinstance(action_space, spaces.Discrete):
        policy_cls = "CategoricalMixin"
    elif isinstance(action_space, spaces.MultiDiscrete):
        policy_cls = "MultiCategoricalMixin"
    else:
        raise NetworkSpecError(
            f"task {task!r}: action space {action_space} is not supported (Box, Discrete or MultiDiscrete)"
        )
    containers, source = _input_containers(observation_space, task)
    containers.append({"name": "net", "input": source, "layers": list(units), "activations": activation})
    policy: dict[str, Any] = {"class": policy_cls, "network": containers, "output": "ACTIONS"}
    if policy_cls == "GaussianMixin":
        policy["initial_log_std"] = float(initial_log_std)
    value = {"class": "DeterministicMixin", "network": containers, "output": "ONE"}
    return {"separate": bool(separate), "policy": policy, "value": value}


def mlp_spec(
    units: Sequence[int], activation: str = "elu", *, separate: bool = False, initial_log_std: float = 0.0
) -> dict[str, Any]:
    """Our tuned MLP as a spec: one container ``net`` of ``units`` on ``OBSERVATIONS`` for both roles (one trunk
    for both unless ``separate``), a Gaussian policy and a value head (``train.models.units``, ``activation``)."""
    if not units or any(isinstance(u, bool) or not isinstance(u, int) or u < 1 for u in units):
        raise NetworkSpecError(f"train.models.units: {list(units)!r}; give a non-empty list of positive layer sizes")
    containers = [{"name": "net", "input": "OBSERVATIONS", "layers": list(units), "activations": activation}]
    policy = {"class": "GaussianMixin", "network": containers, "output": "ACTIONS", "initial_log_std": initial_log_std}
    value = {"class": "DeterministicMixin", "network": containers, "output": "ONE"}
    return {"separate": bool(separate), "policy": policy, "value": value}


def _image_container(name: str, read: str, space: spaces.Box) -> dict[str, Any]:
    """Our small CNN on an image ``Box`` that expression ``read`` gives (HWC turned CHW, uint8 scaled to [0, 1])."""
    layout = image_layout(space)
    image = f"permute({read}, (0, 3, 1, 2))" if layout == "HWC" else read
    if space.dtype == "uint8":
        image = f"{image} / 255"  # converted where the tensor lives (the device), not on the host
    height, width = space.shape[:2] if layout == "HWC" else space.shape[1:]
    if min(height, width) >= 36:  # a small Atari-style extractor
        convs = [{"conv2d": [16, 8, 4]}, {"conv2d": [32, 4, 2]}, "flatten"]
    else:  # thumbnails: the same two layers with kernels that fit
        convs = [{"conv2d": [16, 3, 1]}, {"conv2d": [32, 3, 2]}, "flatten"]
    return {"name": name, "input": image, "layers": convs, "activations": "relu"}


def _input_containers(space: gymnasium.Space, task: str) -> tuple[list[dict[str, Any]], str]:
    """The containers before our MLP and the MLP's input expression, by observation space: a flat ``Box`` as is,
    an image through the CNN, ``Discrete``/``MultiDiscrete`` one-hot (skrl's ``one_hot_encoding``), a ``Dict`` or
    ``Tuple`` of those entry by entry (skrl's ``OBSERVATIONS["key"]``), concatenated.

    :raises NetworkSpecError: any other space (a nested ``Dict``, a ``Box`` of 2 or 4+ dimensions), in one line.
    """
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return [], "OBSERVATIONS"
    if image_layout(space) is not None:
        return [_image_container("features_extractor", "OBSERVATIONS", space)], "features_extractor"
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return [], "one_hot_encoding(OBSERVATION_SPACE, OBSERVATIONS)"
    if not isinstance(space, spaces.Dict | spaces.Tuple):
        raise NetworkSpecError(
            f"task {task!r}: observation space {space} is not supported by the default network (a flat Box, an image "
            "Box HxWxC or CxHxW, Discrete, MultiDiscrete, or a Dict or Tuple of those); give train.models.network"
        )
    keys = sorted(space.keys()) if isinstance(space, spaces.Dict) else list(range(len(space)))  # skrl's order
    images = [key for key in keys if image_layout(space[key]) is not None]
    containers, parts = [], []
    for key in keys:
        entry, read = space[key], f"OBSERVATIONS[{key!r}]"
        if isinstance(entry, spaces.Box) and len(entry.shape) == 1:
            parts.append(read)
        elif image_layout(entry) is not None:
            name = "features_extractor" if len(images) == 1 else f"features_extractor_{images.index(key)}"
            containers.append(_image_container(name, read, entry))
            parts.append(name)
        elif isinstance(entry, spaces.Discrete | spaces.MultiDiscrete):
            parts.append(f"one_hot_encoding(OBSERVATION_SPACE[{key!r}], {read})")
        else:
            raise NetworkSpecError(
                f"task {task!r}: observation entry {key!r} is {entry}; the default network takes flat Box, image Box, "
                "Discrete and MultiDiscrete entries; give train.models.network"
            )
    return containers, parts[0] if len(parts) == 1 else f"concatenate([{', '.join(parts)}])"


# -- expressions ----------------------------------------------------------------------------------------------

Env = dict[str, Any]  # name -> tensor or space while a network runs


class _Expression:
    """A container input or output, parsed once into closures over allowed operations (no ``eval``)."""

    _BINARY: dict[type, Callable[[Any, Any], Any]] = {
        ast.Add: lambda a, b: a + b,
        ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b,
    }

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as error:
            raise NetworkSpecError(f"{where}: input {text!r} is not an expression ({error.msg})") from None
        self.names: set[str] = set()
        self.run = self._compile(tree.body)

    def __getstate__(self) -> dict[str, str]:
        """Pickled (``torch.save`` of a model, ``deepcopy``) as its text: the closures are rebuilt from it."""
        return {"text": self.text, "where": self.where}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["text"], state["where"])

    def _fail(self, node: ast.AST) -> NetworkSpecError:
        return NetworkSpecError(f"{self.where}: {ast.unparse(node)!r} in {self.text!r} is not supported")

    def _compile(self, node: ast.AST) -> Callable[[Env], Any]:
        if isinstance(node, ast.Name):
            name = node.id
            self.names.add(name)
            return lambda env: env[name]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float | str)
            and not isinstance(node.value, bool)
        ):
            value = node.value
            return lambda env: value
        if isinstance(node, ast.Tuple | ast.List):
            items = [self._compile(e) for e in node.elts]
            return lambda env: [item(env) for item in items]
        if isinstance(node, ast.Subscript):
            target, key = self._compile(node.value), self._compile(node.slice)
            return lambda env: target(env)[key(env)]
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINARY:
            op, left, right = self._BINARY[type(node.op)], self._compile(node.left), self._compile(node.right)
            return lambda env: op(left(env), right(env))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            args = [self._compile(a) for a in node.args]
            name = node.func.id
            if name == "concatenate" and len(args) == 1:
                return lambda env: torch.cat(args[0](env), dim=1)
            if name == "permute" and len(args) == 2:
                return lambda env: torch.permute(args[0](env), tuple(args[1](env)))
            if name == "one_hot_encoding" and len(args) == 2:
                return lambda env: _one_hot(args[0](env), args[1](env))
        raise self._fail(node)


def _one_hot(space: gymnasium.Space, x: torch.Tensor) -> torch.Tensor:
    """skrl's ``one_hot_encoding`` of a tensorised Discrete or MultiDiscrete value."""
    if isinstance(space, spaces.Discrete):
        return nn.functional.one_hot(x[:, 0].long(), num_classes=int(space.n)).float()
    if isinstance(space, spaces.MultiDiscrete):
        parts = [nn.functional.one_hot(x[:, i].long(), num_classes=int(n)) for i, n in enumerate(space.nvec)]
        return torch.cat(parts, dim=1).float()
    raise NetworkSpecError(f"one_hot_encoding of a {type(space).__name__} space; only Discrete and MultiDiscrete")


def _output_head(output: str, where: str) -> tuple[str, str | None]:
    """``(token, activation)`` of an output expression: ``"ACTIONS"`` -> ("ACTIONS", None), ``"tanh(ONE)"`` ->
    ("ONE", "tanh")."""
    text = output.strip()
    activation = None
    if text.endswith(")") and "(" in text:
        activation, _, inner = text[:-1].partition("(")
        activation, text = activation.strip().lower(), inner.strip()
        if activation not in ACTIVATION_MODULES:
            raise NetworkSpecError(f"{where}.output: {output!r}: {activation!r} is not an activation")
    if text not in ("ACTIONS", "ONE"):
        raise NetworkSpecError(f"{where}.output: {output!r}; expected ACTIONS or ONE, optionally in an activation")
    return text, activation


# -- modules --------------------------------------------------------------------------------------------------


ACTIVATIONS: dict[str, type[nn.Module]] = {name: getattr(nn, cls) for name, cls in schema.ACTIVATIONS.items()}
ACTIVATIONS["elu"] = ELU  # the CPU-tuned ELU (omni_sfp.compute.kernels)
ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    **ACTIVATIONS,  # train.models.activation's names
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "softsign": nn.Softsign,
    "softmax": lambda: nn.Softmax(dim=-1),
}  # skrl's instantiators name these too
INITS = schema.INITS


def activation_after_layer(name: str) -> nn.Module:
    """The activation module ``name`` for the output of a linear or convolution layer: the ELU in place (nothing
    else reads that output, and the trunk keeps half the activations for the backward; a forward hook on the layer
    sees its output before the ELU overwrites it, as with torch's own in-place activations), any other as built."""
    return ELU(inplace=True) if ACTIVATION_MODULES[name] is ELU else ACTIVATION_MODULES[name]()


def _init_layer(module: nn.Module, init: str, gain: float) -> None:
    """``train.models.init`` on a linear or conv layer (module docstring, "Weights")."""
    if init not in INITS:
        raise NetworkSpecError(f"train.models.init={init!r} is not one of {', '.join(INITS)}")
    if init == "orthogonal":
        nn.init.orthogonal_(module.weight, gain=gain)
    if init != "torch" and module.bias is not None:
        nn.init.zeros_(module.bias)


class Trunk(nn.Module):
    """The containers of one role, in order, from the flat inputs skrl passes (``observations``, ``states``) to the
    last container's output. Its layers are built concrete from a sample of the spaces (skrl builds lazy ones).

    ``source`` is the one input the containers read (``"observations"`` or ``"states"``), or None when they read
    both: only a one-input trunk can be keyed by the cache.
    """

    def __init__(
        self, containers: Sequence[Container], spaces_: Mapping[str, gymnasium.Space | None], init: str
    ) -> None:
        super().__init__()
        self.spaces = dict(spaces_)
        self.order = [c.name for c in containers]
        self.inputs: dict[str, _Expression] = {}
        self.blocks = nn.ModuleDict()
        sample = {key: _sample(space) for key, space in self.spaces.items() if space is not None}
        env: Env = self._env(sample)
        sources: set[str] = set()
        reads: dict[str, set[str]] = {}  # container -> the inputs it depends on
        for container in containers:
            where = f"container {container.name!r}"
            expression = _Expression(container.input, where)
            for name in expression.names & set(SOURCES):
                if self.spaces.get(SOURCES[name]) is None:
                    raise NetworkSpecError(
                        f"{where}: input {container.input!r} reads {name}; the task has no {name.lower()}"
                    )
            earlier = set(self.order[: self.order.index(container.name)])
            unknown = expression.names - set(SOURCES) - set(_SPACES) - earlier
            if unknown:
                raise NetworkSpecError(
                    f"{where}: input {container.input!r} names {', '.join(sorted(unknown))}: not OBSERVATIONS, "
                    "STATES, OBSERVATION_SPACE, STATE_SPACE or an earlier container"
                )
            sources |= {SOURCES[n] for n in expression.names if n in SOURCES}
            sources |= {s for n in expression.names & earlier for s in reads[n]}
            reads[container.name] = {SOURCES[n] for n in expression.names if n in SOURCES} | {
                s for n in expression.names & earlier for s in reads[n]
            }
            x = expression.run(env)
            if not isinstance(x, torch.Tensor):
                raise NetworkSpecError(f"{where}: input {container.input!r} is not a tensor")
            x = x.float() if not x.is_floating_point() else x
            block = []
            for layer in container.layers:
                module = _make_layer(layer, x, where)
                if isinstance(module, nn.Linear | nn.Conv2d):
                    _init_layer(module, init, gain=math.sqrt(2))
                block.append(module)
                with torch.no_grad():
                    x = module(x)
                if layer.activation:  # a linear or convolution layer's (flatten has none): the ELU acts in place
                    block.append(activation_after_layer(layer.activation))
            self.inputs[container.name] = expression
            self.blocks[container.name] = nn.Sequential(*block)
            env[container.name] = x
        if env[self.order[-1]].dim() != 2:
            raise NetworkSpecError(f"container {self.order[-1]!r}: its output must be flat (add a flatten layer)")
        self.features = int(env[self.order[-1]].shape[1])
        self.source = sources.pop() if len(sources) == 1 else None
        read = containers[0].input.strip()
        self.direct = (  # the source that forward hands straight to the one container's layers, else None
            SOURCES[read]
            if len(containers) == 1 and read in SOURCES and _flat_box(self.spaces[SOURCES[read]])
            else None
        )

    def _env(self, flat: Mapping[str, torch.Tensor | None]) -> Env:
        env: Env = {}
        for name, key in SOURCES.items():
            space = self.spaces.get(key)
            if space is not None and flat.get(key) is not None:
                # a flat Box is its own tensor (skrl's unflatten would only reshape it to itself)
                env[name] = flat[key] if _flat_box(space) else unflatten_tensorized_space(space, flat[key])
        for name, key in _SPACES.items():
            env[name] = self.spaces.get(key)
        return env

    def forward(self, observations: torch.Tensor | None, states: torch.Tensor | None = None) -> torch.Tensor:
        if self.direct is not None:  # one container on a flat Box (an MLP): its layers, no expressions
            return self.blocks[self.order[0]](observations if self.direct == "observations" else states)
        env = self._env({"observations": observations, "states": states})
        for name in self.order:
            x = self.inputs[name].run(env)
            env[name] = self.blocks[name](x if x.is_floating_point() else x.float())
        return env[self.order[-1]]


def make_mlp(
    in_features: int, units: Sequence[int], activation: str = "elu", init: str = "orthogonal"
) -> nn.Sequential:
    """The layers of :func:`mlp_spec`'s trunk on ``in_features`` inputs, as :class:`Trunk` builds them (for code that
    wants the plain MLP: the benchmark's framework-free floor, the cache's own tests)."""
    spec = parse(mlp_spec(units, activation), source="make_mlp")
    box = spaces.Box(-float("inf"), float("inf"), (int(in_features),))
    return Trunk(spec.policy.network, {"observations": box}, init).blocks["net"]


def _flat_box(space: gymnasium.Space | None) -> bool:
    """A 1-D ``Box`` of floats: skrl's flat layout is the value itself."""
    return isinstance(space, spaces.Box) and len(space.shape) == 1 and space.dtype.kind == "f"


class _OneInput(nn.Module):
    """A :class:`Trunk` that reads one input, as the single tensor :class:`SingleForwardPass` keys on."""

    def __init__(self, trunk: Trunk) -> None:
        super().__init__()
        self.net = trunk
        self.key = trunk.source

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x, None) if self.key == "observations" else self.net(None, x)


def _sample(space: gymnasium.Space) -> torch.Tensor:
    """Two flat zero rows of ``space`` (skrl's layout), to build concrete layers from."""
    from skrl.utils.spaces.torch import compute_space_size

    return torch.zeros(2, compute_space_size(space, occupied_size=True))


def _make_layer(layer: Layer, x: torch.Tensor, where: str) -> nn.Module:
    options = dict(layer.options)
    if layer.kind == "flatten":
        return nn.Flatten(**options)
    if layer.kind == "linear":
        if x.dim() != 2:
            raise NetworkSpecError(f"{where}: a linear layer on a {x.dim()}-dimensional input; flatten it first")
        return nn.Linear(x.shape[1], int(options.pop("out_features")), **options)
    if x.dim() != 4:
        raise NetworkSpecError(f"{where}: a conv2d layer on input of shape {tuple(x.shape[1:])}; it needs (C, H, W)")
    module = nn.Conv2d(x.shape[1], int(options.pop("out_channels")), **options)
    try:
        with torch.no_grad():
            module(x)
    except RuntimeError as error:
        raise NetworkSpecError(
            f"{where}: conv2d on input of shape {tuple(x.shape[1:])}: {str(error).splitlines()[0]}"
        ) from None
    return module


# -- skrl models ----------------------------------------------------------------------------------------------


def _policy_size(cls: str, action_space: gymnasium.Space) -> int:
    if cls == "CategoricalMixin":
        if not isinstance(action_space, spaces.Discrete):
            raise NetworkSpecError(f"CategoricalMixin needs a Discrete action space, the task has {action_space}")
        return int(action_space.n)
    if cls == "MultiCategoricalMixin":
        if not isinstance(action_space, spaces.MultiDiscrete):
            raise NetworkSpecError(
                f"MultiCategoricalMixin needs a MultiDiscrete action space, the task has {action_space}"
            )
        return int(sum(action_space.nvec))
    if not isinstance(action_space, spaces.Box):
        raise NetworkSpecError(f"GaussianMixin needs a Box action space, the task has {action_space}")
    return int(gymnasium.spaces.flatdim(action_space))


class _Head(nn.Module):
    def __init__(self, features: int, size: int, activation: str | None, init: str, gain: float) -> None:
        super().__init__()
        self.linear = nn.Linear(features, size)
        _init_layer(self.linear, init, gain)
        self.activation = ACTIVATION_MODULES[activation]() if activation else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) if self.activation is None else self.activation(self.linear(x))


class _SpecModel:
    """What every spec-built model shares (a mixin before skrl's mixins and ``Model``): building trunks and
    heads, the policy's act with its deterministic action (``mean_actions``, which :mod:`omni_sfp.run.outputs.evaluation`
    reads: the mean, or each sub-space's argmax), and the cache's controls."""

    policy_cls = "GaussianMixin"

    def _init_model(self, spec: NetworkSpec, observation_space, action_space, device, state_space) -> None:
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        self.spec = spec
        self.register_load_state_dict_pre_hook(_upgrade_mlp_names)

    def _init_policy_mixin(self, role: Role) -> None:
        kwargs = {k: v for k, v in role.options if k in _MIXIN_OPTIONS[role.cls]}
        _POLICY_MIXINS[role.cls].__init__(self, role="policy", **kwargs)

    def _init_value_mixin(self, role: Role) -> None:
        DeterministicMixin.__init__(self, role="value", clip_actions=role.option("clip_actions", False))

    def _build_trunk(self, role: Role, init: str) -> Trunk:
        return Trunk(role.network, {"observations": self.observation_space, "states": self.state_space}, init)

    def _build_policy(self, role: Role, trunk: Trunk, init: str) -> None:
        token, activation = _output_head(role.output, "policy")
        size = _policy_size(role.cls, self.action_space) if token == "ACTIONS" else 1
        self.policy_head = _Head(trunk.features, size, activation, init, gain=0.01)
        if role.cls == "GaussianMixin":
            initial = float(role.option("initial_log_std", 0.0))
            fixed = bool(role.option("fixed_log_std", False))
            self.log_std = nn.Parameter(torch.full((size,), initial), requires_grad=not fixed)

    def _build_value(self, role: Role, trunk: Trunk, init: str) -> None:
        token, activation = _output_head(role.output, "value")
        if token != "ONE":
            raise NetworkSpecError(f"value.output: {role.output!r}; the value network outputs ONE")
        self.value_head = _Head(trunk.features, 1, activation, init, gain=1.0)

    def _policy_outputs(self, net_output: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        return net_output, ({"log_std": self.log_std} if self.policy_cls == "GaussianMixin" else {})

    def _policy_act(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        actions, outputs = _POLICY_MIXINS[self.policy_cls].act(self, inputs, role="policy")
        if self.policy_cls != "GaussianMixin":  # GaussianMixin adds its own mean_actions
            outputs["mean_actions"] = self.deterministic_actions(outputs["net_output"])
        return actions, outputs

    def deterministic_actions(self, net_output: torch.Tensor) -> torch.Tensor:
        """The deterministic action from the policy head's output: the mean, or each sub-space's argmax."""
        if self.policy_cls == "GaussianMixin":
            return net_output
        if self.policy_cls == "CategoricalMixin":
            return net_output.argmax(dim=-1, keepdim=True)
        logits = torch.split(net_output, [int(n) for n in self.action_space.nvec], dim=-1)
        return torch.stack([part.argmax(dim=-1) for part in logits], dim=-1)

    def __getstate__(self) -> dict:
        """``deepcopy``/``torch.save``: skip skrl's last distributions, which hold the last call's graph."""
        state = Model.__getstate__(self)
        for key in ("_g_distribution", "_c_distribution"):
            state.pop(key, None)
            state[key] = None
        if "_distributions" in state:
            state["_distributions"] = []
        return state

    def update_parameters(self, model: nn.Module, *, polyak: float = 1.0) -> None:
        """skrl's target-network update writes through ``.data``: drop the cached entries afterwards."""
        Model.update_parameters(self, model, polyak=polyak)
        clear_caches(self)

    def clear_sfp_cache(self) -> None:
        clear_caches(self)

    @property
    def sfp_stats(self) -> SFPStats:
        return collect_stats(self)

    def reset_sfp_stats(self) -> None:
        for module in sfp_modules(self):
            module.reset_stats()


def upgraded_mlp_names(model: nn.Module, state: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``state`` with the parameter names of omni-sfp's MLP models before the MLP became a spec (0.x checkpoints:
    ``SharedActorCritic``'s ``trunk.trunk.<i>``, ``policy_head``, ``value_head``; the separate ``GaussianActor`` and
    ``ValueCritic``'s ``net.0.<i>`` and ``net.1``) as this ``model`` names them, in the same order; other names as
    they are. The values are the same tensors (a shared trunk's under both roles' names)."""
    roles = [role for role in ("policy", "value") if hasattr(model, f"{role}_head")]
    upgraded: dict[str, Any] = {}
    for key, value in state.items():
        rest = key[len(prefix) :] if key.startswith(prefix) else None
        head, _, tail = (rest or "").partition(".")
        if rest is not None and rest.startswith("trunk.trunk.") and len(roles) == 2:
            for role in roles:
                upgraded[f"{prefix}{role}_trunk.trunk.net.blocks.net.{rest[len('trunk.trunk.') :]}"] = value
        elif rest is not None and head in ("policy_head", "value_head") and tail in ("weight", "bias"):
            upgraded[f"{prefix}{head}.linear.{tail}"] = value
        elif rest is not None and rest.startswith(("net.0.", "net.1.")) and len(roles) == 1:
            part = f"{roles[0]}_trunk.net.blocks.net." if rest.startswith("net.0.") else f"{roles[0]}_head.linear."
            upgraded[f"{prefix}{part}{rest[len('net.0.') :]}"] = value
        else:
            upgraded[key] = value
    return upgraded


def _upgrade_mlp_names(model: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """``load_state_dict``'s pre-hook: an earlier MLP checkpoint loads (:func:`upgraded_mlp_names`)."""
    upgraded = upgraded_mlp_names(model, state_dict, prefix)
    if list(upgraded) != list(state_dict):
        state_dict.clear()
        state_dict.update(upgraded)


_POLICY_MIXINS: dict[str, type] = {
    "GaussianMixin": GaussianMixin,
    "CategoricalMixin": CategoricalMixin,
    "MultiCategoricalMixin": MultiCategoricalMixin,
}


def _run(trunk: nn.Module, inputs: Mapping[str, Any]) -> torch.Tensor:
    """A trunk on skrl's inputs: the one tensor a cached or one-input trunk reads, else both."""
    if isinstance(trunk, SingleForwardPass):
        return trunk(inputs[trunk.trunk.key])
    if isinstance(trunk, _OneInput):
        return trunk(inputs[trunk.key])
    return trunk(inputs.get("observations"), inputs.get("states"))


def _wrap(trunk: Trunk) -> nn.Module:
    return _OneInput(trunk) if trunk.source is not None else trunk


def _unwrap(module: nn.Module) -> Trunk:
    while not isinstance(module, Trunk):
        module = module.net if isinstance(module, _OneInput) else module.trunk
    return module


class _SharedRoles(_SpecModel):
    """One model for both roles (skrl PPO's ``policy`` and ``value``): a shared trunk through
    :class:`SingleForwardPass` where both roles' networks agree and read one input, else a trunk per role."""

    def __init__(
        self,
        spec: NetworkSpec,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        device: str | torch.device | None = None,
        *,
        state_space: gymnasium.Space | None = None,
        init: str = "torch",
        cache_check: str = "auto",
    ) -> None:
        self._init_model(spec, observation_space, action_space, device, state_space)
        self._init_policy_mixin(spec.policy)
        self._init_value_mixin(spec.value)
        same = spec.policy.network == spec.value.network
        policy_trunk = self._build_trunk(spec.policy, init)
        self.shared = same and policy_trunk.source is not None
        if self.shared:
            self.policy_trunk = self.value_trunk = SingleForwardPass(_OneInput(policy_trunk), cache_check)
            value_trunk = policy_trunk
        else:
            value_trunk = policy_trunk if same else self._build_trunk(spec.value, init)
            self.policy_trunk = _wrap(policy_trunk)
            self.value_trunk = self.policy_trunk if same else _wrap(value_trunk)
        self._build_policy(spec.policy, policy_trunk, init)
        self._build_value(spec.value, value_trunk, init)
        self.to(self.device)

    def act(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        if role == "policy":
            return self._policy_act(inputs)
        if role == "value":
            return DeterministicMixin.act(self, inputs, role=role)
        raise ValueError(f"{type(self).__name__} plays role 'policy' or 'value', not {role!r}")

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        if role == "policy":
            return self._policy_outputs(self.policy_head(_run(self.policy_trunk, inputs)))
        if role == "value":
            return self.value_head(_run(self.value_trunk, inputs)), {}
        raise ValueError(f"{type(self).__name__} plays role 'policy' or 'value', not {role!r}")


class GaussianSpecActorCritic(_SharedRoles, GaussianMixin, DeterministicMixin, Model):
    """A spec's shared model with a Gaussian policy (``Box`` actions)."""

    policy_cls = "GaussianMixin"


class CategoricalSpecActorCritic(_SharedRoles, CategoricalMixin, DeterministicMixin, Model):
    """A spec's shared model with a Categorical policy (``Discrete`` actions)."""

    policy_cls = "CategoricalMixin"


class MultiCategoricalSpecActorCritic(_SharedRoles, MultiCategoricalMixin, DeterministicMixin, Model):
    """A spec's shared model with a MultiCategorical policy (``MultiDiscrete`` actions)."""

    policy_cls = "MultiCategoricalMixin"


class _PolicyRole(_SpecModel):
    """The policy of a ``separate: true`` spec: its own trunk, no cache."""

    def __init__(self, spec, observation_space, action_space, device=None, *, state_space=None, init="torch"):
        self._init_model(spec, observation_space, action_space, device, state_space)
        self._init_policy_mixin(spec.policy)
        trunk = self._build_trunk(spec.policy, init)
        self.policy_trunk = _wrap(trunk)
        self._build_policy(spec.policy, trunk, init)
        self.to(self.device)

    def act(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self._policy_act(inputs)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self._policy_outputs(self.policy_head(_run(self.policy_trunk, inputs)))


class GaussianSpecPolicy(_PolicyRole, GaussianMixin, Model):
    policy_cls = "GaussianMixin"


class CategoricalSpecPolicy(_PolicyRole, CategoricalMixin, Model):
    policy_cls = "CategoricalMixin"


class MultiCategoricalSpecPolicy(_PolicyRole, MultiCategoricalMixin, Model):
    policy_cls = "MultiCategoricalMixin"


class SpecValue(_SpecModel, DeterministicMixin, Model):
    """The value function of a ``separate: true`` spec: its own trunk, no cache."""

    def __init__(self, spec, observation_space, action_space, device=None, *, state_space=None, init="torch"):
        self._init_model(spec, observation_space, action_space, device, state_space)
        self._init_value_mixin(spec.value)
        trunk = self._build_trunk(spec.value, init)
        self.value_trunk = _wrap(trunk)
        self._build_value(spec.value, trunk, init)
        self.to(self.device)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.value_head(_run(self.value_trunk, inputs)), {}


SHARED_MODELS = {
    "GaussianMixin": GaussianSpecActorCritic,
    "CategoricalMixin": CategoricalSpecActorCritic,
    "MultiCategoricalMixin": MultiCategoricalSpecActorCritic,
}
POLICY_MODELS = {
    "GaussianMixin": GaussianSpecPolicy,
    "CategoricalMixin": CategoricalSpecPolicy,
    "MultiCategoricalMixin": MultiCategoricalSpecPolicy,
}


class DeterministicPolicy(nn.Module):
    """A spec-built policy's deterministic path for deployment, outside the cache: flat observations in, the mean
    action (Gaussian) or each sub-space's argmax (Categorical, MultiCategorical; int64) out. Its trunk runs the
    parsed expressions in Python, so it is traced (``torch.jit.trace``, ONNX), not scripted."""

    def __init__(self, model: _SpecModel) -> None:
        super().__init__()
        self.trunk = _unwrap(model.policy_trunk)
        self.head = model.policy_head
        self.kind = model.policy_cls
        self.parts = [int(n) for n in model.action_space.nvec] if self.kind == "MultiCategoricalMixin" else []

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.trunk(observations, None))
        if self.kind == "GaussianMixin":
            return logits
        if self.kind == "CategoricalMixin":
            return logits.argmax(dim=-1, keepdim=True)
        return torch.stack([part.argmax(dim=-1) for part in torch.split(logits, self.parts, dim=-1)], dim=-1)
