"""Bare-torch PPO: the compute floor plus everything the floor leaves out, each done the cheapest way.

The floor (omni_sfp/bench/floor.py) is the network work alone. A PPO run must also step the env, sample the
actions and their log-probabilities, keep the rollout, normalise observations and values, compute GAE, shuffle
the minibatches and evaluate PPO's clipped losses. This row does all of that in straight-line torch: no
framework, no model or memory classes, no per-call bookkeeping, the normalisers' statistics updated once an
update from the whole rollout, one gather per epoch. So its distance to the floor is what PPO itself costs on
this machine, and a framework's distance to *it* is the framework's own overhead (docs/benchmarks.md, "The rows").

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

LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
CLIP_NORMALISED = 5.0  # skrl's RunningStandardScaler clip_threshold, as the rows use


class RunningMoments:
    """The running mean and variance of skrl's ``RunningStandardScaler`` (float64, Chan et al.'s parallel update
    from a count of 1, each batch's unbiased variance), merged a whole rollout at a time, with the float32 mean
    and standard deviation that normalising uses."""

    def __init__(self, size: int, device: torch.device, epsilon: float = 1e-8) -> None:
        self.mean = torch.zeros(size, dtype=torch.float64, device=device)
        self.variance = torch.ones(size, dtype=torch.float64, device=device)
        self.count = 1.0
        self.epsilon = epsilon
        self._refresh()

    def _refresh(self) -> None:
        self.mean32 = self.mean.float()
        self.std32 = self.variance.float().sqrt()

    def update(self, samples: torch.Tensor) -> None:
        """Merge ``samples`` (any leading shape, last dimension ``size``) into the statistics."""
        flat = samples.reshape(-1, self.mean.shape[0])
        batch_mean, batch_variance, batch_count = flat.mean(0), flat.var(0), flat.shape[0]
        delta, total = batch_mean - self.mean, self.count + batch_count
        m2 = (
            self.variance * self.count
            + batch_variance * batch_count
            + delta.square() * self.count * batch_count / total
        )
        self.mean = self.mean + delta * batch_count / total
        self.variance, self.count = m2 / total, total
        self._refresh()

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean32) / (self.std32 + self.epsilon)).clamp_(-CLIP_NORMALISED, CLIP_NORMALISED)

    def denormalise(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().clamp(-CLIP_NORMALISED, CLIP_NORMALISED) * self.std32 + self.mean32


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
    observation_moments, value_moments = RunningMoments(observation_size, device), RunningMoments(1, device)

    def autocast():
        return torch.autocast(device_type=device.type, enabled=row.mixed_precision)

    observations, _ = env.reset()
    for _ in range(work.total_updates):
        with torch.no_grad():
            log_std = net.log_std.detach()
            std = log_std.exp()
            for t in range(steps):
                with autocast():
                    mean, value = net(observation_moments.normalise(observations))
                noise = torch.randn_like(mean, dtype=torch.float32)
                actions = mean.float() + noise * std
                next_observations, rewards, terminated, truncated, _ = env.step(actions)
                rollout["observations"][t] = observations
                rollout["actions"][t] = actions
                rollout["log_prob"][t] = (-0.5 * noise.square() - log_std - LOG_SQRT_2PI).sum(-1, keepdim=True)
                rollout["values"][t] = value_moments.denormalise(value)
                rollout["rewards"][t] = rewards.view(envs, 1) * work.rewards_scale
                torch.logical_or(terminated.view(envs, 1), truncated.view(envs, 1), out=rollout["dones"][t])
                observations = next_observations
            with autocast():
                _, last_values = net(observation_moments.normalise(observations))
            values = rollout["values"]
            returns, advantages = _gae(rollout, value_moments.denormalise(last_values), work)
            observation_moments.update(rollout["observations"])
            value_moments.update(returns)
            samples = steps * envs
            inputs = observation_moments.normalise(rollout["observations"].reshape(samples, -1))
            scalars = torch.stack(
                [
                    rollout["log_prob"].flatten(),
                    value_moments.normalise(values).flatten(),
                    value_moments.normalise(returns).flatten(),
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


def _gae(rollout: dict[str, torch.Tensor], last_values: torch.Tensor, work: Work) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns and standardised advantages (GAE), an episode end cutting the recursion after its step."""
    rewards, values, continues = rollout["rewards"], rollout["values"], rollout["dones"].logical_not()
    advantages = torch.empty_like(rewards)
    advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + work.discount_factor * continues[t] * next_values - values[t]
        advantage = delta + work.discount_factor * work.gae_lambda * continues[t] * advantage
        advantages[t] = advantage
        next_values = values[t]
    returns = advantages + values
    return returns, (advantages - advantages.mean()) / (advantages.std() + 1e-8)
