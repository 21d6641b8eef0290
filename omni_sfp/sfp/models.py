"""skrl 2 models: the shared actor-critic whose trunk goes through the single-forward-pass cache, and the
separate actor and critic used as the ``models.separate=true`` baseline."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium
import torch
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from torch import nn

from omni_sfp.compute.kernels import ELU
from omni_sfp.config import schema
from omni_sfp.sfp.cache import CacheCheck, SFPStats, SingleForwardPass, clear_caches, collect_stats, sfp_modules

ACTIVATIONS: dict[str, type[nn.Module]] = {name: getattr(nn, cls) for name, cls in schema.ACTIVATIONS.items()}
ACTIVATIONS["elu"] = ELU
INITS = schema.INITS


def _linear(in_features: int, out_features: int, init: str, gain: float) -> nn.Linear:
    """``init="orthogonal"``: orthogonal weights of ``gain``, zero bias (PPO practice); ``"torch"``: nn.Linear's
    own default (skrl's model instantiators); ``"torch_zero_bias"``: its weights with zero biases (rl_games'
    ``initializer: default``, network_builder.py zeroes every Linear's bias)."""
    if init not in INITS:
        raise ValueError(f"init={init!r} is not one of {', '.join(INITS)}")
    linear = nn.Linear(in_features, out_features)
    if init == "orthogonal":
        nn.init.orthogonal_(linear.weight, gain=gain)
    if init != "torch":
        nn.init.zeros_(linear.bias)
    return linear


def activation_after_layer(name: str, modules: Mapping[str, Callable[[], nn.Module]] = ACTIVATIONS) -> nn.Module:
    """The activation module ``name`` (of ``modules``) for the output of a linear or convolution layer: the ELU in
    place (nothing else reads that output; :class:`omni_sfp.compute.kernels.ELU`), any other as it is built."""
    return ELU(inplace=True) if modules[name] is ELU else modules[name]()


def make_mlp(
    in_features: int, units: Sequence[int], activation: str = "elu", init: str = "orthogonal"
) -> nn.Sequential:
    """A plain MLP trunk: Linear + activation per entry of ``units`` (orthogonal gain sqrt(2) by default).

    Its ELUs act in place on their Linear's output (:class:`omni_sfp.compute.kernels.ELU`): nothing else reads
    that output, and the trunk keeps half the activations for the backward. A forward hook on a Linear sees its
    output before the ELU overwrites it, as with torch's own in-place activations."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not one of {', '.join(ACTIVATIONS)}")
    if not units or any(int(u) <= 0 for u in units):
        raise ValueError(f"units={list(units)!r} must be a non-empty list of positive layer sizes")
    layers: list[nn.Module] = []
    for size in units:
        layers += [_linear(in_features, int(size), init, gain=2**0.5), activation_after_layer(activation)]
        in_features = int(size)
    return nn.Sequential(*layers)


class SharedActorCritic(GaussianMixin, DeterministicMixin, Model):
    """One trunk, a Gaussian policy head and a value head: pass the same instance as skrl PPO's ``policy``
    and ``value``. The trunk runs through :class:`SingleForwardPass`, so the second role's call on the same
    input is served from the cache (``single_forward_pass=False`` or ``cache_check="off"``: double pass).
    """

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        device: str | torch.device | None = None,
        *,
        units: Sequence[int] = (256, 128, 64),
        activation: str = "elu",
        init: str = "orthogonal",
        single_forward_pass: bool = True,
        cache_check: CacheCheck = "auto",
        initial_log_std: float = 0.0,
        clip_actions: bool = False,
        clip_log_std: bool = True,
        min_log_std: float = -20.0,
        max_log_std: float = 2.0,
    ) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(
            self,
            clip_actions=clip_actions,
            clip_log_std=clip_log_std,
            min_log_std=min_log_std,
            max_log_std=max_log_std,
            role="policy",
        )
        DeterministicMixin.__init__(self, role="value")
        self.trunk = SingleForwardPass(
            make_mlp(self.num_observations, units, activation, init), cache_check if single_forward_pass else "off"
        )
        self.policy_head = _linear(int(units[-1]), self.num_actions, init, gain=0.01)
        self.value_head = _linear(int(units[-1]), 1, init, gain=1.0)
        self.log_std = nn.Parameter(torch.full((self.num_actions,), float(initial_log_std)))
        self.to(self.device)

    def act(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        if role == "policy":
            return GaussianMixin.act(self, inputs, role=role)
        if role == "value":
            return DeterministicMixin.act(self, inputs, role=role)
        raise ValueError(f"SharedActorCritic plays role 'policy' or 'value', not {role!r}")

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        features = self.trunk(inputs["observations"])
        if role == "policy":
            return self.policy_head(features), {"log_std": self.log_std}
        if role == "value":
            return self.value_head(features), {}
        raise ValueError(f"SharedActorCritic plays role 'policy' or 'value', not {role!r}")

    def __getstate__(self) -> dict:
        """``deepcopy``/``torch.save`` of the model: skip skrl's last policy distribution, which holds the last
        call's graph (graphs cannot be copied) and is rebuilt by the next ``act``. The cache drops its own entry."""
        state = super().__getstate__()
        state["_g_distribution"] = None
        return state

    def update_parameters(self, model: nn.Module, *, polyak: float = 1.0) -> None:
        """skrl's target-network update writes through ``.data``, which no version counter sees: drop the
        cached entries afterwards."""
        super().update_parameters(model, polyak=polyak)
        clear_caches(self)

    def clear_sfp_cache(self) -> None:
        """Drop the cached trunk output (e.g. at an update boundary, or after writing parameters via ``.data``)."""
        clear_caches(self)

    @property
    def sfp_stats(self) -> SFPStats:
        """Trunk-call counters of this model's cache: hits, misses, bypasses."""
        return collect_stats(self)

    def reset_sfp_stats(self) -> None:
        for module in sfp_modules(self):
            module.reset_stats()


class GaussianActor(GaussianMixin, Model):
    """The policy of the separate-models baseline (``models.separate=true``): its own trunk, no cache."""

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        device: str | torch.device | None = None,
        *,
        units: Sequence[int] = (256, 128, 64),
        activation: str = "elu",
        init: str = "orthogonal",
        initial_log_std: float = 0.0,
        clip_actions: bool = False,
    ) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=clip_actions, role="policy")
        self.net = nn.Sequential(
            make_mlp(self.num_observations, units, activation, init),
            _linear(int(units[-1]), self.num_actions, init, gain=0.01),
        )
        self.log_std = nn.Parameter(torch.full((self.num_actions,), float(initial_log_std)))
        self.to(self.device)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class ValueCritic(DeterministicMixin, Model):
    """The value function of the separate-models baseline: its own trunk, no cache."""

    def __init__(
        self,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        device: str | torch.device | None = None,
        *,
        units: Sequence[int] = (256, 128, 64),
        activation: str = "elu",
        init: str = "orthogonal",
    ) -> None:
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self, role="value")
        self.net = nn.Sequential(
            make_mlp(self.num_observations, units, activation, init), _linear(int(units[-1]), 1, init, gain=1.0)
        )
        self.to(self.device)

    def compute(self, inputs: dict[str, Any], role: str = "") -> tuple[torch.Tensor, dict[str, Any]]:
        return self.net(inputs["observations"]), {}
