"""Recurrent models (LSTM, GRU) from a network spec with an ``rnn`` block, for skrl's ``PPO_RNN`` protocol.

The block (``train.models.network.rnn``, next to ``separate``; rl_games' ``rnn:`` block maps onto it)::

    rnn: {class: LSTM | GRU, hidden_size: 64, num_layers: 1, sequence_length: 16,
          before_mlp: true, concat_input: false, layer_norm: false}

rl_games' semantics (``network_builder.py``): ``before_mlp`` runs the recurrent layer on the observations and the
containers on its output (then ``OBSERVATIONS`` in the containers' inputs is that output), else the containers run
first and the recurrent layer reads the last one's output; ``concat_input`` concatenates the observations to the
recurrent layer's input (after the MLP) or output (before the MLP); ``layer_norm`` normalises its output.

The skrl side (``skrl/agents/torch/ppo/ppo_rnn.py`` and its RNN model examples): ``get_specification()`` returns
``{"rnn": {"sequence_length": L, "sizes": [(num_layers, num_envs, hidden_size), ...]}}`` (h, and c for an LSTM);
the inputs carry ``"rnn"`` (the hidden states, ``(num_layers, batch, hidden_size)`` each) and, in the update,
``"terminated"`` and ``"truncated"``: then the batch is ``batch / L`` sequences of ``L`` consecutive steps of one
env, the hidden states are those before each row (the first of each sequence is used), and a hidden state is
reset to zero after a step where the episode ended. The outputs carry ``"rnn"``: the hidden states after the call.
Without ``"terminated"`` the call is one step of every env (the rollout).

Both roles share one trunk through :class:`~omni_sfp.sfp.cache.SingleForwardPass`, keyed on the observations, the
hidden states and the done masks (and so on the sequence layout: their shapes): the value call after the policy
call on the same sequence is served, any other call computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import torch
from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model, MultiCategoricalMixin
from torch import nn

from omni_sfp.sfp import network
from omni_sfp.sfp.cache import SingleForwardPass
from omni_sfp.sfp.network import Container, NetworkSpec, NetworkSpecError, RnnSpec, Trunk, _SpecModel

RNN_MODULES = {"LSTM": nn.LSTM, "GRU": nn.GRU}


class RecurrentTrunk(nn.Module):
    """The shared trunk: the recurrent layer before or after the spec's containers (:class:`RnnSpec`).

    ``forward(x, terminated, truncated, *hidden) -> (features, *hidden_after)``, every argument explicit so that the
    cache keys it (``hidden_state_input``). ``terminated`` None: one step per row (the rollout); else ``x`` holds
    sequences of ``sequence_length`` rows, ``hidden`` the states before every row (the first of each sequence is
    used) and the state is zeroed after every row where ``terminated | truncated``. The steps run one at a time (the
    rollout's computation, static shapes; the sequences are short)."""

    hidden_state_input = True

    def __init__(
        self,
        containers: Sequence[Container],
        rnn: RnnSpec,
        space: gymnasium.Space | None,
        init: str,
        key: str = "observations",
    ) -> None:
        super().__init__()
        name = {"observations": "OBSERVATIONS", "states": "STATES"}[key]
        if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
            raise NetworkSpecError(f"train.models.network.rnn: a recurrent network reads a flat Box {key}, not {space}")
        self.rnn_spec, self.key = rnn, key  # key: the input it reads, observations or states
        self.sequence_length = rnn.sequence_length
        size = int(space.shape[0])
        if rnn.before_mlp:
            rnn_in = size
            space = gymnasium.spaces.Box(-float("inf"), float("inf"), (rnn.hidden_size + size * rnn.concat_input,))
        self.mlp = Trunk(containers, {"observations": None, "states": None, key: space}, init)
        if not rnn.before_mlp:
            rnn_in = self.mlp.features + size * rnn.concat_input
        if self.mlp.source != key:
            raise NetworkSpecError(f"train.models.network: this recurrent network's containers read {name} only")
        self.rnn = RNN_MODULES[rnn.cls](rnn_in, rnn.hidden_size, num_layers=rnn.num_layers, batch_first=True)
        self.norm = nn.LayerNorm(rnn.hidden_size) if rnn.layer_norm else nn.Identity()
        self.features = self.mlp.features if rnn.before_mlp else rnn.hidden_size

    def forward(
        self, x: torch.Tensor, terminated: torch.Tensor | None, truncated: torch.Tensor | None, *hidden: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        spec = self.rnn_spec
        if spec.before_mlp:
            out, hidden = self._recurrent(x, terminated, truncated, hidden)
            out = torch.cat([out, x], dim=-1) if spec.concat_input else out
            return (self._mlp(out), *hidden)
        out = self._mlp(x)
        out = torch.cat([out, x], dim=-1) if spec.concat_input else out
        out, hidden = self._recurrent(out, terminated, truncated, hidden)
        return (out, *hidden)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x, None) if self.key == "observations" else self.mlp(None, x)

    def _recurrent(self, x, terminated, truncated, hidden) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        # the recurrent layer runs in float32 under mixed precision: oneDNN has no bf16 LSTM on most CPUs, and the
        # hidden states stay float32 (as the memory stores them) from step to step
        with torch.autocast(x.device.type, enabled=False):
            return self._recurrent_fp32(x.float(), terminated, truncated, tuple(h.float() for h in hidden))

    def _recurrent_fp32(self, x, terminated, truncated, hidden) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        if terminated is None:  # one step of every env
            out, after = self.rnn(x.unsqueeze(1), self._pack(hidden))
            return self.norm(out.squeeze(1)), self._unpack(after)
        length = self.sequence_length
        if x.shape[0] % length:
            raise ValueError(f"a batch of {x.shape[0]} rows is not sequences of {length}")
        done = terminated if truncated is None else terminated | truncated
        keep = done.reshape(-1, length, 1).logical_not().unsqueeze(0)  # (1, sequences, L, 1)
        steps = x.reshape(-1, length, x.shape[-1])
        state = tuple(h.reshape(h.shape[0], -1, length, h.shape[-1])[:, :, 0] for h in hidden)  # (layers, S, H)
        outputs = []
        for t in range(length):
            out, after = self.rnn(steps[:, t : t + 1], self._pack(state))
            outputs.append(out)
            state = tuple(torch.where(keep[:, :, t], h, 0.0) for h in self._unpack(after))
        out = torch.cat(outputs, dim=1).reshape(-1, self.rnn.hidden_size)
        return self.norm(out), state

    def _pack(self, hidden: tuple[torch.Tensor, ...]):
        return (
            (hidden[0].contiguous(), hidden[1].contiguous()) if self.rnn_spec.cls == "LSTM" else hidden[0].contiguous()
        )

    def _unpack(self, after) -> tuple[torch.Tensor, ...]:
        return tuple(after) if isinstance(after, tuple) else (after,)


class _Recurrent(_SpecModel):
    """What every recurrent model has (before skrl's ``Model`` in the bases, so its ``get_specification`` wins)."""

    rnn_spec: RnnSpec
    num_envs: int

    def get_specification(self) -> dict[str, Any]:
        """skrl's RNN specification: the sequence length and the hidden states' sizes, ``(layers, envs, hidden)``."""
        rnn = self.rnn_spec
        size = (rnn.num_layers, self.num_envs, rnn.hidden_size)
        return {"rnn": {"sequence_length": rnn.sequence_length, "sizes": [size] * rnn.states}}

    def initial_states(self, num_envs: int | None = None) -> list[torch.Tensor]:
        """Zero hidden states for ``num_envs`` envs (the model's by default)."""
        rnn = self.rnn_spec
        size = (rnn.num_layers, self.num_envs if num_envs is None else num_envs, rnn.hidden_size)
        return [torch.zeros(size, device=self.device) for _ in range(rnn.states)]


class _RecurrentRoles(_Recurrent):
    """One recurrent model for both roles: the trunk through :class:`SingleForwardPass` (keyed on the observations,
    hidden states and done masks), a head per role, skrl's ``PPO_RNN`` protocol (module docstring)."""

    def __init__(
        self,
        spec: NetworkSpec,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        device: str | torch.device | None = None,
        *,
        num_envs: int = 1,
        init: str = "torch",
        cache_check: str = "auto",
    ) -> None:
        self._init_model(spec, observation_space, action_space, device, None)
        self._init_policy_mixin(spec.policy)
        self._init_value_mixin(spec.value)
        self.rnn_spec: RnnSpec = spec.rnn
        self.num_envs = int(num_envs)
        trunk = RecurrentTrunk(spec.policy.network, spec.rnn, observation_space, init)
        self.policy_trunk = self.value_trunk = SingleForwardPass(trunk, cache_check)
        self._build_policy(spec.policy, trunk, init)
        self._build_value(spec.value, trunk, init)
        self.to(self.device)

    def _features(self, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        return _features(self.policy_trunk, inputs)

    def act(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        if role == "policy":
            return self._policy_act(inputs)
        if role == "value":
            return DeterministicMixin.act(self, inputs, role=role)
        raise ValueError(f"{type(self).__name__} plays role 'policy' or 'value', not {role!r}")

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        features, outputs = self._features(inputs)
        if role == "policy":
            net, extra = self._policy_outputs(self.policy_head(features))
            return net, {**extra, **outputs}
        if role == "value":
            return self.value_head(features), outputs
        raise ValueError(f"{type(self).__name__} plays role 'policy' or 'value', not {role!r}")


def _features(trunk: nn.Module, inputs: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """A recurrent trunk (cached or not) on skrl's inputs: its features and ``{"rnn": hidden states after}``."""
    hidden = inputs.get("rnn")
    if hidden is None:
        raise ValueError('a recurrent model needs its hidden states in inputs["rnn"] (skrl\'s PPO_RNN passes them)')
    key = (trunk.trunk if isinstance(trunk, SingleForwardPass) else trunk).key
    features, *after = trunk(inputs[key], inputs.get("terminated"), inputs.get("truncated"), *hidden)
    return features, {"rnn": after}


class _RecurrentPolicy(_Recurrent):
    """The policy of a recurrent spec whose value is a model of its own (a critic on states): its own trunk and
    hidden states, no cache (nothing is shared)."""

    def __init__(self, spec, observation_space, action_space, device=None, *, num_envs=1, init="torch"):
        self._init_model(spec, observation_space, action_space, device, None)
        self._init_policy_mixin(spec.policy)
        self.rnn_spec, self.num_envs = spec.rnn, int(num_envs)
        self.policy_trunk = RecurrentTrunk(spec.policy.network, spec.rnn, observation_space, init)
        self._build_policy(spec.policy, self.policy_trunk, init)
        self.to(self.device)

    def act(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self._policy_act(inputs)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        features, outputs = _features(self.policy_trunk, inputs)
        net, extra = self._policy_outputs(self.policy_head(features))
        return net, {**extra, **outputs}


class GaussianRecurrentPolicy(_RecurrentPolicy, GaussianMixin, Model):
    policy_cls = "GaussianMixin"


class CategoricalRecurrentPolicy(_RecurrentPolicy, CategoricalMixin, Model):
    policy_cls = "CategoricalMixin"


class MultiCategoricalRecurrentPolicy(_RecurrentPolicy, MultiCategoricalMixin, Model):
    policy_cls = "MultiCategoricalMixin"


class RecurrentValue(_Recurrent, DeterministicMixin, Model):
    """The value of a recurrent spec as a model of its own: its trunk reads ``STATES`` (rl_games' recurrent
    ``central_value_config.network``) or the observations, with hidden states of its own."""

    def __init__(
        self, spec, observation_space, action_space, device=None, *, state_space=None, num_envs=1, init="torch"
    ):
        self._init_model(spec, observation_space, action_space, device, state_space)
        self._init_value_mixin(spec.value)
        self.rnn_spec, self.num_envs = spec.rnn, int(num_envs)
        reads_states = any("STATES" in c.input for c in spec.value.network)
        space = state_space if reads_states else observation_space
        key = "states" if reads_states else "observations"
        self.value_trunk = RecurrentTrunk(spec.value.network, spec.rnn, space, init, key)
        self._build_value(spec.value, self.value_trunk, init)
        self.to(self.device)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        features, outputs = _features(self.value_trunk, inputs)
        return self.value_head(features), outputs


class GaussianRecurrentActorCritic(_RecurrentRoles, GaussianMixin, DeterministicMixin, Model):
    policy_cls = "GaussianMixin"


class CategoricalRecurrentActorCritic(_RecurrentRoles, CategoricalMixin, DeterministicMixin, Model):
    policy_cls = "CategoricalMixin"


class MultiCategoricalRecurrentActorCritic(_RecurrentRoles, MultiCategoricalMixin, DeterministicMixin, Model):
    policy_cls = "MultiCategoricalMixin"


RECURRENT_POLICIES = {
    "GaussianMixin": GaussianRecurrentPolicy,
    "CategoricalMixin": CategoricalRecurrentPolicy,
    "MultiCategoricalMixin": MultiCategoricalRecurrentPolicy,
}
RECURRENT_MODELS = {
    "GaussianMixin": GaussianRecurrentActorCritic,
    "CategoricalMixin": CategoricalRecurrentActorCritic,
    "MultiCategoricalMixin": MultiCategoricalRecurrentActorCritic,
}


def is_recurrent(model: Any) -> bool:
    """Whether ``model`` follows skrl's RNN protocol (its specification names hidden-state sizes)."""
    get = getattr(model, "get_specification", None)
    return bool(get is not None and get().get("rnn", {}).get("sizes"))


def describe(models: Mapping[str, Model]) -> str:
    """One line on the recurrent model, for the start of a run."""
    model = models["policy"]
    rnn = model.rnn_spec
    if models["value"] is not model:
        value = models["value"].value_trunk
        return (
            f"a recurrent policy ({rnn.cls} {rnn.num_layers}x{rnn.hidden_size} on observations) and a recurrent value "
            f"on {value.key}, each with hidden states of its own: nothing shared, no cache"
        )
    cached = any(cache.cache_check != "off" for cache in network.sfp_modules(model))
    how = "through the single-forward-pass cache" if cached else "cache off: each role runs it (the double pass)"
    where = "before" if rnn.before_mlp else "after"
    mlp = " -> ".join(model.policy_trunk.trunk.mlp.order)
    return (
        f"one recurrent trunk ({rnn.cls} {rnn.num_layers}x{rnn.hidden_size} {where} {mlp}, sequences of "
        f"{rnn.sequence_length}) for both roles, {how}, keyed on the observations and the hidden states; a head per role"
    )


class RecurrentDeterministicPolicy(nn.Module):
    """A recurrent policy's deterministic path for deployment, outside the cache: ``(observations, *hidden) ->
    (actions, *hidden_after)``, one step of every env, the hidden state an explicit input and output (the deployer
    keeps it, and zeroes it where an episode starts). Its MLP runs the parsed expressions in Python, so it is traced
    (``torch.jit.trace``, ONNX), not scripted."""

    def __init__(self, model: _RecurrentRoles) -> None:
        super().__init__()
        self.trunk = model.policy_trunk.trunk
        self.head = model.policy_head
        self.kind = model.policy_cls
        self.states = model.rnn_spec.states
        self.state_size = (model.rnn_spec.num_layers, model.rnn_spec.hidden_size)
        self.parts = [int(n) for n in model.action_space.nvec] if self.kind == "MultiCategoricalMixin" else []

    def forward(self, observations: torch.Tensor, *hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features, *after = self.trunk(observations, None, None, *hidden)
        logits = self.head(features)
        if self.kind == "GaussianMixin":
            actions = logits
        elif self.kind == "CategoricalMixin":
            actions = logits.argmax(dim=-1, keepdim=True)
        else:
            actions = torch.stack([part.argmax(dim=-1) for part in torch.split(logits, self.parts, dim=-1)], dim=-1)
        return (actions, *after)
