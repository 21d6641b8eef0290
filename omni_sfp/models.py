"""skrl 2 models: the shared actor-critic whose trunk goes through the single-forward-pass cache, and the
separate actor and critic used as the ``models.separate=true`` baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import torch
import torch.nn.functional as F
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from torch import nn

from omni_sfp import schema
from omni_sfp.cache import CacheCheck, SFPStats, SingleForwardPass, clear_caches, collect_stats, sfp_modules


def fast_elu(x: torch.Tensor) -> torch.Tensor:
    """ELU (alpha 1) as ``max(x, exp(min(x, 0)) - 1)``: within 2**-23 of torch's (``exp`` and ``expm1`` are each
    within an ulp, under 2**-24 for results in (-1, 1); ``- 1`` is exact or rounds by 2**-25)."""
    return torch.clamp(x, max=0.0).exp_().sub_(1.0).clamp_(min=x)  # exp(x) - 1 >= x where x <= 0


class FastELUFunction(torch.autograd.Function):
    """:func:`fast_elu` with torch's own ELU backward, computed from the output (``dy/dx = y + 1`` for x <= 0)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return fast_elu(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return torch.ops.aten.elu_backward(grad, 1.0, 1.0, 1.0, True, output)


ELU_KERNELS: tuple[str, ...] = ("torch", "fast")  # torch's F.elu, or :func:`fast_elu`
# The ELU kernel each path uses, process-wide (as torch.set_num_threads): without autograd (the rollout, the
# last values, evaluation) and with it (the update's minibatches). torch's until :func:`use_elu_kernels` says
# otherwise: the runner sets them from omni_sfp.cpu_choices, which measures both on the CPU that runs them.
_elu_kernels = {"no_grad": "torch", "autograd": "torch"}


def use_elu_kernels(*, no_grad: str, autograd: str) -> None:
    """Choose the kernel of :class:`ELU` without and with autograd (each one of :data:`ELU_KERNELS`).

    :raises ValueError: a kernel that is not one of them.
    """
    for path, kernel in (("no_grad", no_grad), ("autograd", autograd)):
        if kernel not in ELU_KERNELS:
            raise ValueError(f"ELU kernel {path}={kernel!r} is not one of {', '.join(ELU_KERNELS)}")
    _elu_kernels.update(no_grad=no_grad, autograd=autograd)


def elu_kernels() -> dict[str, str]:
    """The kernels :class:`ELU` uses now: ``{"no_grad": ..., "autograd": ...}``."""
    return dict(_elu_kernels)


class ELU(nn.ELU):
    """``nn.ELU`` whose CPU float32 kernel is chosen per path (:func:`use_elu_kernels`): torch's, or
    :func:`fast_elu` without autograd and :class:`FastELUFunction` with it. Both are within 2**-23 of each other.

    Why a choice: torch's CPU ELU evaluates ``expm1`` on every element. Where ``expm1`` is not vectorised
    (AMD Zen 3, no AVX-512) that is about twice the cost of ``exp``, and :func:`fast_elu` took 198 us
    against 324 for a 512 x 256 batch, a training minibatch of 8192 (forward and backward) 44.8 ms against
    56.5. Where it is (Zen 4 and Zen 5 with AVX-512), the rewrite only adds passes: torch's was 213 us
    against 233 (Zen 4) and 110 against 107 (Zen 5), with autograd 2.9 ms against 3.2 at 8192 x 256 (Zen 5).
    So neither wins everywhere, and omni_sfp.cpu_choices measures both on the machine. On other devices, in
    other dtypes, for ``alpha != 1``, in place and in TorchScript it is torch's ELU.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            torch.jit.is_scripting()
            or self.alpha != 1.0
            or self.inplace
            or x.device.type != "cpu"
            or x.dtype != torch.float32
        ):
            return F.elu(x, self.alpha, self.inplace)
        return self._chosen(x)

    @torch.jit.unused
    def _chosen(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and torch.is_grad_enabled():
            return FastELUFunction.apply(x) if _elu_kernels["autograd"] == "fast" else F.elu(x)
        return fast_elu(x) if _elu_kernels["no_grad"] == "fast" else F.elu(x)


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


def make_mlp(
    in_features: int, units: Sequence[int], activation: str = "elu", init: str = "orthogonal"
) -> nn.Sequential:
    """A plain MLP trunk: Linear + activation per entry of ``units`` (orthogonal gain sqrt(2) by default)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not one of {', '.join(ACTIVATIONS)}")
    if not units or any(int(u) <= 0 for u in units):
        raise ValueError(f"units={list(units)!r} must be a non-empty list of positive layer sizes")
    layers: list[nn.Module] = []
    for size in units:
        layers += [_linear(in_features, int(size), init, gain=2**0.5), ACTIVATIONS[activation]()]
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
