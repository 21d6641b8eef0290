"""skrl models from a network spec, through one builder: :func:`build_models` takes every spec (our tuned MLP,
a CNN, a Dict-observation network, a recurrent trunk, shared or separate), so every network gets the same weight
init, the same cache controls, compiles the same way (:func:`trunks`) and exports the same way
(:func:`deterministic_policy`).

:class:`SharedActorCritic` is the tuned MLP as a library class: the shared model of :func:`omni_sfp.sfp.network.mlp_spec`,
for code that builds a model by hand (``SharedActorCritic(observation_space, action_space, device, units=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium
import torch
from skrl.models.torch import Model
from torch import nn

from omni_sfp.sfp import network, recurrent
from omni_sfp.sfp.cache import CacheCheck, sfp_modules
from omni_sfp.sfp.network import NetworkSpec, NetworkSpecError, Trunk


def build_models(
    spec: NetworkSpec,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    device: str | torch.device,
    *,
    num_envs: int = 1,
    state_space: gymnasium.Space | None = None,
    init: str = "torch",
    single_forward_pass: bool = True,
    cache_check: str = "auto",
) -> dict[str, Model]:
    """skrl PPO's ``{"policy": ..., "value": ...}`` for ``spec``: one model for both roles, its shared trunk through
    the single-forward-pass cache, unless the spec is ``separate`` (then a policy model and a value model, nothing
    cached). A spec with an ``rnn`` block gets :mod:`omni_sfp.sfp.recurrent`'s models (skrl's ``PPO_RNN``
    protocol; ``num_envs`` sizes their hidden states), and so does a recurrent value that differs from the policy's.

    ``init``: ``train.models.init`` (:mod:`omni_sfp.sfp.network`, "Weights"); ``torch`` is skrl's instantiators'.

    :raises NetworkSpecError: the spec does not fit the task's spaces (one line naming the container).
    """
    if init not in network.INITS:
        raise NetworkSpecError(f"train.models.init={init!r} is not one of {', '.join(network.INITS)}")
    cache_check = cache_check if single_forward_pass else "off"
    network._policy_size(spec.policy.cls, action_space)  # the action space fits the class: one line if not
    if spec.rnn is not None:
        if spec.separate or spec.value.network != spec.policy.network:
            common = {"num_envs": num_envs, "init": init}
            policy = recurrent.RECURRENT_POLICIES[spec.policy.cls](
                spec, observation_space, action_space, device, **common
            )
            value = recurrent.RecurrentValue(
                spec, observation_space, action_space, device, state_space=state_space, **common
            )
            return {"policy": policy, "value": value}
        model = recurrent.RECURRENT_MODELS[spec.policy.cls](
            spec, observation_space, action_space, device, num_envs=num_envs, init=init, cache_check=cache_check
        )
        return {"policy": model, "value": model}
    if spec.separate:
        common = {"state_space": state_space, "init": init}
        policy = network.POLICY_MODELS[spec.policy.cls](spec, observation_space, action_space, device, **common)
        value = network.SpecValue(spec, observation_space, action_space, device, **common)
        return {"policy": policy, "value": value}
    model = network.SHARED_MODELS[spec.policy.cls](
        spec, observation_space, action_space, device, state_space=state_space, init=init, cache_check=cache_check
    )
    return {"policy": model, "value": model}


def trunks(model: nn.Module) -> list[Trunk]:
    """The spec-built trunks in ``model`` (a shared trunk once; a recurrent trunk's containers): what
    :func:`omni_sfp.compute.compile_policy.compile_trunk` compiles, inside the cache, whatever the network."""
    return list(dict.fromkeys(module for module in model.modules() if isinstance(module, Trunk)))


def deterministic_policy(model: Model) -> nn.Module:
    """The policy's deterministic path for deployment, outside the cache: a feed-forward policy's
    :class:`~omni_sfp.sfp.network.DeterministicPolicy` (observations -> actions), a recurrent one's
    :class:`~omni_sfp.sfp.recurrent.RecurrentDeterministicPolicy` (the hidden state in and out).

    :raises NetworkSpecError: a model this builder did not build, or a policy that reads states.
    """
    if recurrent.is_recurrent(model):
        if not isinstance(model, recurrent._Recurrent) or not hasattr(model, "policy_head"):
            raise NetworkSpecError(f"cannot export a {type(model).__name__}: not a recurrent policy omni_sfp built")
        return recurrent.RecurrentDeterministicPolicy(model)
    if not isinstance(model, network._SpecModel) or not hasattr(model, "policy_head"):
        raise NetworkSpecError(
            f"cannot export a {type(model).__name__}: export knows the policies omni_sfp.sfp.models.build_models builds "
            "(wrap your own model's deterministic path yourself)"
        )
    if network._unwrap(model.policy_trunk).source != "observations":
        raise NetworkSpecError("cannot export a policy that reads states: a deployed policy sees observations only")
    return network.DeterministicPolicy(model)


def describe(models: Mapping[str, Model]) -> str:
    """One line on what the two roles share, for the start of a run."""
    policy, value = models["policy"], models["value"]
    if recurrent.is_recurrent(policy):
        return recurrent.describe(models)
    if policy is not value:
        return "separate policy and value networks: nothing shared, no cache"
    cached = any(cache.cache_check != "off" for cache in sfp_modules(policy))
    how = "through the single-forward-pass cache" if cached else "cache off: each role runs it (the double pass)"
    policy_trunk, value_trunk = network._unwrap(policy.policy_trunk), network._unwrap(policy.value_trunk)
    if policy.shared:
        return f"one trunk ({' -> '.join(policy_trunk.order)}) for both roles, {how}; a head per role"
    if policy_trunk is value_trunk:
        return "one trunk on observations and states, run by each role: not cached (the cache keys one input)"
    return (
        f"nothing shared: the policy reads {policy_trunk.source or 'observations and states'}, the value "
        f"{value_trunk.source or 'observations and states'} (a trunk each, no cache)"
    )


class SharedActorCritic(network.GaussianSpecActorCritic):
    """The tuned MLP shared by both roles (:func:`omni_sfp.sfp.network.mlp_spec` through the builder's model): pass
    the same instance as skrl PPO's ``policy`` and ``value``. The trunk runs through
    :class:`~omni_sfp.sfp.cache.SingleForwardPass`, so the second role's call on the same input is served from the
    cache (``single_forward_pass=False`` or ``cache_check="off"``: the double pass)."""

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
        if activation not in network.ACTIVATIONS:
            raise NetworkSpecError(f"activation={activation!r} is not one of {', '.join(network.ACTIVATIONS)}")
        models = network.mlp_spec(units, activation, initial_log_std=initial_log_std)
        models["policy"].update(
            clip_actions=clip_actions, clip_log_std=clip_log_std, min_log_std=min_log_std, max_log_std=max_log_std
        )
        spec = network.parse(models, source="SharedActorCritic")
        super().__init__(
            spec,
            observation_space,
            action_space,
            device,
            init=init,
            cache_check=cache_check if single_forward_pass else "off",
        )

    @property
    def trunk(self) -> nn.Module:
        """The trunk's cache (:class:`~omni_sfp.sfp.cache.SingleForwardPass`): ``model.trunk(x)`` goes through it,
        ``model.trunk.trunk(x)`` does not."""
        return self.policy_trunk

    @property
    def layers(self) -> nn.Sequential:
        """The MLP's layers (Linear, activation, ...), the modules the cache's entry depends on."""
        return network._unwrap(self.policy_trunk).blocks["net"]


def mlp_models(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    device: str | torch.device,
    *,
    units: Sequence[int] = (256, 128, 64),
    activation: str = "elu",
    separate: bool = False,
    init: str = "orthogonal",
    initial_log_std: float = 0.0,
    single_forward_pass: bool = True,
    cache_check: str = "auto",
) -> dict[str, Model]:
    """The tuned MLP's ``{"policy": ..., "value": ...}`` (shared, or ``separate``), as a run builds them for a flat
    ``Box`` task from ``train.models.units``, ``activation``, ``separate`` and ``init``."""
    spec = network.parse(
        network.mlp_spec(units, activation, separate=separate, initial_log_std=initial_log_std), source="mlp_models"
    )
    return build_models(
        spec,
        observation_space,
        action_space,
        device,
        init=init,
        single_forward_pass=single_forward_pass,
        cache_check=cache_check,
    )
