"""The compute floor: the network work of one PPO run and nothing else, in bare torch.

Per update: ``horizon + 1`` inference forwards over all envs (the rollout and the last values), then
``epochs x mini_batches`` steps of forward, backward, the gradient-norm clip and fused Adam on contiguous
slices of a random batch. The clip is part of the update rule every peer row applies (rl_games'
``truncate_grads``, skrl's ``grad_norm_clip``): without it the learning is not the same, so the floor pays it,
the cheapest way torch has (the norm, then fused Adam's ``grad_scale``: no second pass over the gradients).
No environment, preprocessing, GAE, PPO clipping or bookkeeping: what this work costs on this machine at
best, so a row's ratio to it is its framework overhead. It runs with the CPU choices
omni-sfp's rows make (omni_sfp.compute.cpu_choices: the ELU kernels, the allocator, fused Adam, measured once per CPU
kind) at the benchmark's thread count, so none of them is counted as overhead.

What it leaves out, and so what a peer row may legitimately spend above it: the env, sampling actions, the
log-probabilities of the rollout, normalisation, GAE, shuffling (its minibatches are contiguous slices, as
rl_games' are: skrl's and omni-sfp's are a fresh permutation each epoch) and PPO's clipped losses.
A row *below* it does less network work or runs faster kernels: see docs/benchmarks.md, "The floor".

The advantages are drawn afresh each update, as each rollout brings new ones. On one fixed batch the policy
term has no minimum (the means run away from the actions of negative advantage), the weights grow update
after update, and subnormal numbers slowed the floor from the fifth update on (Intel family 6 model 167:
1.65 s an update, then 2.2 s, then 3.5 s by the tenth), so that a longer run put the floor above the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from omni_sfp.bench.configs import Row, Work, kernels_info
from omni_sfp.compute.cpu_choices import CPUChoices, Settings, apply, resolve
from omni_sfp.compute.optim import clip_and_step
from omni_sfp.sfp.network import make_mlp


class FloorNet(nn.Module):
    """The shared actor-critic's arithmetic: the same trunk, a mean head, a value head and a log std."""

    def __init__(self, observation_size: int, action_size: int, work: Work) -> None:
        super().__init__()
        self.trunk = make_mlp(observation_size, work.units, work.activation)
        self.policy_head = nn.Linear(work.units[-1], action_size)
        self.value_head = nn.Linear(work.units[-1], 1)
        self.log_std = nn.Parameter(torch.zeros(action_size))

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(observations)
        return self.policy_head(features), self.value_head(features)


def build_network(env, work: Work, row: Row) -> tuple[FloorNet, list[nn.Parameter], torch.optim.Adam, CPUChoices]:
    """The network at the env's sizes, its parameters and its Adam, after making omni-sfp's CPU choices for the row
    at the benchmark's thread count (so that no kernel choice is counted as a row's overhead)."""
    choices = resolve(Settings(threads=torch.get_num_threads()), env.device, mixed_precision=row.mixed_precision)
    apply(choices, env.device)
    net = FloorNet(env.observation_space.shape[0], env.action_space.shape[0], work).to(env.device)
    parameters = list(net.parameters())
    optimizer = torch.optim.Adam(parameters, lr=work.learning_rate, fused=choices.fused_adam)
    return net, parameters, optimizer, choices


def run_floor(
    env, work: Work, row: Row, *, on_update: Callable[[], None], on_rollout: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Run ``work.total_updates`` updates' worth of network work at the env's sizes; ``on_rollout`` after each
    update's inference forwards, ``on_update`` after its learning: the table splits the floor as the other rows."""
    device = env.device
    net, parameters, optimizer, choices = build_network(env, work, row)
    observation_size, action_size = env.observation_space.shape[0], env.action_space.shape[0]
    rollout_observations = torch.randn(work.num_envs, observation_size, device=device)
    observations = torch.randn(work.batch_size, observation_size, device=device)
    actions = torch.randn(work.batch_size, action_size, device=device)
    advantages = torch.randn(work.batch_size, 1, device=device)
    returns = torch.randn(work.batch_size, 1, device=device)

    def autocast():
        return torch.autocast(device_type=device.type, enabled=row.mixed_precision)

    for _ in range(work.total_updates):
        advantages.normal_()  # a fresh draw each update (see above)
        with torch.no_grad(), autocast():
            for _ in range(work.horizon + 1):
                net(rollout_observations)
        on_rollout()
        for _ in range(work.epochs):
            for start in range(0, work.batch_size, work.minibatch_size):
                batch = slice(start, start + work.minibatch_size)
                with autocast():
                    mean, value = net(observations[batch])
                    log_prob = -0.5 * ((actions[batch] - mean) * torch.exp(-net.log_std)).square().sum(-1, keepdim=True)
                    log_prob = log_prob - net.log_std.sum()
                    loss = -(log_prob * advantages[batch]).mean() + (value - returns[batch]).square().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                clip_and_step(optimizer, parameters, work.grad_norm_clip)
        on_update()
    return {"fused_adam": choices.fused_adam, "kernels": kernels_info(choices.as_dict(), choices.sources)}
