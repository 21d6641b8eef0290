"""skrl's PPO, extended for the single-forward-pass model and for a rollout free of host syncs.

What changes against ``skrl.agents.torch.ppo.PPO`` and why:

- ``record_transition`` keeps episode statistics on the device (skrl's base reads four numbers back to
  the host every step) and checks for non-finite data without a sync: the first bad step and env index
  are remembered on the device and reported once per rollout.
- the time-limit bootstrap runs on every step, under the same autocast as ``act()``, instead of only
  when ``truncated.any()`` (a host sync). With the cache this costs nothing: the next step's policy and
  value calls see the same observations and are served from that one trunk forward.
- it counts the *shareable* trunk calls (the value call of each rollout step and minibatch, and each
  bootstrap call), the denominator of the cache hit rate that the runner reports.
"""

from __future__ import annotations

from typing import Any

import torch
from skrl.agents.torch.ppo import PPO

from omni_sfp.cache import SFPStats, collect_stats


class NonFiniteError(FloatingPointError):
    """Raised when observations, rewards or losses are NaN or infinite."""


class EpisodeTracker:
    """Per-env running returns and lengths, and the sum/count of finished episodes, all on the device."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.returns = torch.zeros(num_envs, 1, device=device)
        self.lengths = torch.zeros(num_envs, 1, device=device)
        self.finished = torch.zeros(3, device=device)  # sum of returns, sum of lengths, count

    def record(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        self.returns += rewards
        self.lengths += 1
        done = done.to(self.returns.dtype)
        self.finished += torch.stack([(self.returns * done).sum(), (self.lengths * done).sum(), done.sum()])
        self.returns *= 1 - done
        self.lengths *= 1 - done

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"returns": self.returns, "lengths": self.lengths, "finished": self.finished}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in state.items():
            getattr(self, name).copy_(tensor)

    def pop(self) -> tuple[float | None, float | None, int]:
        """Mean return and length of the episodes finished since the last call (one host sync)."""
        total_return, total_length, count = self.finished.tolist()
        self.finished.zero_()
        if not count:
            return None, None, 0
        return total_return / count, total_length / count, int(count)


class NonFiniteGuard:
    """Remembers, on the device, the first rollout step and env index where data was not finite."""

    def __init__(self, device: torch.device) -> None:
        self.first = torch.full((2,), -1, dtype=torch.long, device=device)  # step, env index
        self.what: list[str] = []

    def check(self, step: int, **tensors: torch.Tensor) -> None:
        for name, tensor in tensors.items():
            if tensor is None:
                continue
            bad = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
            env = torch.argmax(bad.to(torch.int8))
            candidate = torch.stack([torch.full_like(env, step), env])
            fresh = bad.any() & (self.first[0] < 0)
            self.first = torch.where(fresh, candidate, self.first)
            self.what.append(name)

    def raise_if_any(self) -> None:
        step, env = self.first.tolist()
        names = sorted(set(self.what))
        self.what.clear()
        if step >= 0:
            self.first.fill_(-1)
            raise NonFiniteError(
                f"non-finite {'/'.join(names)} at rollout step {step}, env index {env}: check the task's "
                "dynamics and reward, or lower the learning rate"
            )


class SFPPPO(PPO):
    """skrl PPO for single-forward-pass models; see the module docstring for what differs."""

    def __init__(self, *args, check_finite: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.check_finite = check_finite
        self.shareable_calls = 0
        self._episodes: EpisodeTracker | None = None
        self._guard = NonFiniteGuard(self.device)
        self.last_losses: dict[str, float] = {}

    # -- statistics -------------------------------------------------------------------------------------
    @property
    def sfp_stats(self) -> SFPStats:
        models = {id(m): m for m in (self.policy, self.value) if m is not None}
        total = SFPStats()
        for model in models.values():
            total = total + collect_stats(model)
        return total

    @property
    def sfp_share_rate(self) -> float:
        """Cache hits per shareable trunk call (1.0: every call that could be served was served)."""
        return self.sfp_stats.hits / self.shareable_calls if self.shareable_calls else 0.0

    def pop_episode_stats(self) -> tuple[float | None, float | None, int]:
        return self._episodes.pop() if self._episodes is not None else (None, None, 0)

    # -- skrl hooks ---------------------------------------------------------------------------------------
    def act(self, observations, states, *, timestep: int, timesteps: int):
        if self.training:
            self.shareable_calls += 1
        return super().act(observations, states, timestep=timestep, timesteps=timesteps)

    def record_transition(
        self,
        *,
        observations: torch.Tensor,
        states: torch.Tensor | None,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_observations: torch.Tensor,
        next_states: torch.Tensor | None,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        infos: Any,
        timestep: int,
        timesteps: int,
    ) -> None:
        if self._episodes is None:
            self._episodes = EpisodeTracker(rewards.shape[0], rewards.device)
        self._episodes.record(rewards, terminated | truncated)
        if not self.training:
            return
        if self.check_finite:
            self._guard.check(timestep, observations=next_observations, rewards=rewards)

        self._current_next_observations = next_observations
        self._current_next_states = next_states
        if self.cfg.rewards_shaper is not None:
            rewards = self.cfg.rewards_shaper(rewards, timestep, timesteps)

        if self.cfg.time_limit_bootstrap:
            self.shareable_calls += 1
            with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
                inputs = {
                    "observations": self._observation_preprocessor(next_observations),
                    "states": self._state_preprocessor(next_states),
                }
                next_values, _ = self.value.act(inputs, role="value")
            next_values = self._value_preprocessor(next_values, inverse=True)
            rewards = rewards + self.cfg.discount_factor * next_values * truncated

        self.memory.add_samples(
            observations=observations,
            states=states,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            log_prob=self._current_log_prob,
            values=self._current_values,
        )

    def update(self, *, timestep: int, timesteps: int) -> None:
        if self.check_finite:
            self._guard.raise_if_any()
        self.shareable_calls += self.cfg.learning_epochs * self.cfg.mini_batches
        super().update(timestep=timestep, timesteps=timesteps)
        self.last_losses = {
            key.split(" / ")[1]: float(values[-1])
            for key, values in self.tracking_data.items()
            if key.startswith("Loss / ") and values
        }
        if self.check_finite and not all(map(torch.isfinite, map(torch.tensor, self.last_losses.values()))):
            raise NonFiniteError(f"non-finite loss after the update at timestep {timestep}: {self.last_losses}")
