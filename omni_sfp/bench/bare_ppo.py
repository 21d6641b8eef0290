"""Bare-torch PPO: the compute floor plus everything the floor leaves out, each done the cheapest way.

The floor (omni_sfp/bench/floor.py) is the network work alone. A PPO run must also step the env, sample the
actions and their log-probabilities, keep the rollout, normalise observations and values, compute GAE, shuffle
the minibatches and evaluate PPO's clipped losses. This row does all of that in straight-line torch: no
framework, no model or memory classes, no per-call bookkeeping; skrl's running scalers, trained once an update on
the whole rollout; the project's GAE (skrl's arithmetic); one gather per epoch. So its distance to the floor is
what PPO itself costs on this machine, and a framework's distance to *it* is the framework's own overhead
(docs/benchmarks.md, "The rows").

It trains the same network (the floor's :class:`~omni_sfp.bench.floor.FloorNet`, omni-sfp's trunk and heads),
with the work's hyperparameters and the CPU choices omni-sfp's rows make, on the same env object as every row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from omni_sfp.bench.configs import Row, Work, kernels_info
from omni_sfp.bench.floor import build_network
from omni_sfp.compute.optim import clip_and_step
from omni_sfp.ppo.agent import compute_gae
from omni_sfp.ppo.scaler import StandardScaler

LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def run_bare_ppo(env, work: Work, row: Row, *, on_update: Callable[[], None]) -> dict[str, Any]:
    """Train ``work.total_updates`` PPO updates on ``env``; ``on_update`` after each (the env's rollout clock
    splits them, as for the rows that step it through a framework)."""
    device = env.device
    net, parameters, optimizer, choices = build_network(env, work, row)
    observation_size, action_size = env.observation_space.shape[0], env.action_space.shape[0]
    steps, envs = work.horizon, work.num_envs
    rollout = {
        "observations": torch.empty(steps, envs, observation_size, device=device),
        "actions": torch.empty(steps, envs, action_size, device=device),
        "log_prob": torch.empty(steps, envs, 1, device=device),
        "values": torch.empty(steps, envs, 1, device=device),
        "rewards": torch.empty(steps, envs, 1, device=device),
        "dones": torch.empty(steps, envs, 1, dtype=torch.bool, device=device),
    }
    # skrl's running scalers, as the frameworks' (clip 5); trained once an update, on the whole rollout
    observation_scaler, value_scaler = StandardScaler(observation_size, device=device), StandardScaler(1, device=device)

    def autocast():
        return torch.autocast(device_type=device.type, enabled=row.mixed_precision)

    observations, _ = env.reset()
    for _ in range(work.total_updates):
        with torch.no_grad():
            log_std = net.log_std.detach()
            std = log_std.exp()
            for t in range(steps):
                with autocast():
                    mean, value = net(observation_scaler(observations))
                noise = torch.randn_like(mean, dtype=torch.float32)
                actions = mean.float() + noise * std
                next_observations, rewards, terminated, truncated, _ = env.step(actions)
                rollout["observations"][t] = observations
                rollout["actions"][t] = actions
                rollout["log_prob"][t] = (-0.5 * noise.square() - log_std - LOG_SQRT_2PI).sum(-1, keepdim=True)
                rollout["values"][t] = value_scaler(value.float(), inverse=True)
                rollout["rewards"][t] = rewards.view(envs, 1) * work.rewards_scale
                torch.logical_or(terminated.view(envs, 1), truncated.view(envs, 1), out=rollout["dones"][t])
                observations = next_observations
            with autocast():
                _, last_values = net(observation_scaler(observations))
            values = rollout["values"]
            returns, advantages = compute_gae(
                rewards=rollout["rewards"],
                dones=rollout["dones"],
                values=values,
                last_values=value_scaler(last_values.float(), inverse=True),
                discount_factor=work.discount_factor,
                gae_lambda=work.gae_lambda,
            )
            samples = steps * envs
            inputs = observation_scaler(rollout["observations"], train=True).reshape(samples, -1)
            value_scaler(returns, train=True)
            scalars = torch.stack(
                [
                    rollout["log_prob"].flatten(),
                    value_scaler(values).flatten(),
                    value_scaler(returns).flatten(),
                    advantages.flatten(),
                ]
            )
            actions = rollout["actions"].reshape(samples, -1)
        for _ in range(work.epochs):
            order = torch.randperm(samples, device=device)
            epoch_inputs, epoch_actions, epoch_scalars = inputs[order], actions[order], scalars[:, order]
            for start in range(0, samples, work.minibatch_size):
                batch = slice(start, start + work.minibatch_size)
                old_log_prob, old_values, batch_returns, batch_advantages = (
                    row_[batch].unsqueeze(-1) for row_ in epoch_scalars
                )
                with autocast():
                    mean, value = net(epoch_inputs[batch])
                    z = (epoch_actions[batch] - mean) * torch.exp(-net.log_std)
                    log_prob = (-0.5 * z.square() - net.log_std - LOG_SQRT_2PI).sum(-1, keepdim=True)
                    ratio = torch.exp(log_prob - old_log_prob)
                    clipped_ratio = ratio.clamp(1.0 - work.ratio_clip, 1.0 + work.ratio_clip)
                    policy_loss = -torch.min(batch_advantages * ratio, batch_advantages * clipped_ratio).mean()
                    value = old_values + (value - old_values).clamp(-work.value_clip, work.value_clip)
                    value_loss = (batch_returns - value).square().mean()
                optimizer.zero_grad(set_to_none=True)
                (policy_loss + value_loss).backward()
                clip_and_step(optimizer, parameters, work.grad_norm_clip)
        on_update()
    return {"fused_adam": choices.fused_adam, "kernels": kernels_info(choices.as_dict(), choices.sources)}
