"""skrl's PPO, extended for the single-forward-pass model and for a rollout free of host syncs.

What changes against ``skrl.agents.torch.ppo.PPO`` and why:

- ``record_transition`` keeps episode statistics on the device (skrl's base reads four numbers back to
  the host every step) and checks for non-finite data without a sync: the first bad env step, env index
  and quantity are remembered on the device and read once per rollout, at the update.
- ``check_finite`` decides what a non-finite observation, reward or loss does: ``"raise"`` (default) stops
  with :class:`NonFiniteError`, ``"skip"`` drops that rollout's update (a non-finite loss rolls the update
  back) and counts it in ``skipped_updates``, ``"off"`` checks nothing.
- the time-limit bootstrap runs on every step, under the same autocast as ``act()``, instead of only
  when ``truncated.any()`` (a host sync). With the cache this costs nothing: the next step's policy and
  value calls see the same observations and are served from that one trunk forward.
- it counts the *shareable* trunk calls (the value call of each rollout step and minibatch, and each
  bootstrap call), the denominator of the cache hit rate that the runner reports.
- in a multi-process run every decision that changes which collectives run (skip or raise, the episode
  statistics that decide ``best.pt``) is agreed between the ranks (:mod:`omni_sfp.distributed`).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from skrl.agents.torch.ppo import PPO

from omni_sfp import distributed
from omni_sfp.cache import SFPStats, collect_stats

CHECK_FINITE = ("raise", "skip", "off")


class NonFiniteError(FloatingPointError):
    """Raised when observations, rewards or losses are NaN or infinite."""


def check_finite_mode(value: str | bool) -> str:
    """``train.check_finite`` as one of :data:`CHECK_FINITE` (``true``/``false`` of older configs: raise/off)."""
    if isinstance(value, bool):
        return "raise" if value else "off"
    if value not in CHECK_FINITE:
        raise ValueError(f"check_finite={value!r} is not one of {', '.join(CHECK_FINITE)}")
    return value


class EpisodeTracker:
    """Per-env running returns and lengths, and the sum/count of finished episodes, all on the device."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.returns = torch.zeros(num_envs, 1, device=device)
        self.lengths = torch.zeros(num_envs, 1, device=device)
        self.finished = torch.zeros(3, device=device)  # sum of returns, sum of lengths, count

    def record(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        self.returns += rewards
        self.lengths += 1
        zero = torch.zeros((), device=self.returns.device)
        # where, not multiply: a NaN return (check_finite=skip/off) must not leak into other episodes
        finished_returns = torch.where(done, self.returns, zero).sum()
        finished_lengths = torch.where(done, self.lengths, zero).sum()
        self.finished += torch.stack([finished_returns, finished_lengths, done.sum().to(self.finished.dtype)])
        self.returns = torch.where(done, zero, self.returns)
        self.lengths = torch.where(done, zero, self.lengths)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"returns": self.returns, "lengths": self.lengths, "finished": self.finished}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in state.items():
            setattr(self, name, tensor.to(getattr(self, name).device).clone())

    def pop(self) -> tuple[float | None, float | None, int]:
        """Mean return and length of the episodes finished since the last call, over all ranks (one host
        sync; one all-reduce in a multi-process run)."""
        distributed.all_reduce_sum_(self.finished)
        total_return, total_length, count = self.finished.tolist()
        self.finished.zero_()
        if not count:
            return None, None, 0
        return total_return / count, total_length / count, int(count)


class NonFiniteGuard:
    """Remembers, on the device, the first env step, env index and quantity whose data was not finite.

    ``check`` launches a few small kernels and never reads a value back; ``pop`` reads the record (one host
    sync, once per rollout) and clears it.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.first = torch.full((3,), -1, dtype=torch.long, device=self.device)  # step, env index, name index
        self.names: list[str] = []

    def check(self, step: int, **tensors: torch.Tensor | None) -> None:
        for name, tensor in tensors.items():
            if tensor is None:
                continue
            if name not in self.names:
                self.names.append(name)
            bad = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
            env = torch.argmax(bad.to(torch.uint8))  # the first bad env (argmax returns the first maximum)
            candidate = torch.stack([torch.full_like(env, step), env, torch.full_like(env, self.names.index(name))])
            fresh = bad.any() & (self.first[0] < 0)
            self.first = torch.where(fresh, candidate, self.first)

    def pop(self) -> tuple[int, int, str] | None:
        """``(step, env index, quantity)`` of the first non-finite value since the last pop, or None."""
        step, env, name = self.first.tolist()
        if step < 0:
            return None
        self.first = torch.full_like(self.first, -1)
        return step, env, self.names[name]


class SFPPPO(PPO):
    """skrl PPO for single-forward-pass models; see the module docstring for what differs.

    :param check_finite: ``"raise"``, ``"skip"`` or ``"off"`` (``True``/``False`` mean raise/off).
    """

    def __init__(self, *args, check_finite: str | bool = "raise", fused_optimizer: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if fused_optimizer and self.optimizer is not None:
            self._use_fused_adam()
        self.check_finite = check_finite_mode(check_finite)
        self.shareable_calls = 0
        self.skipped_updates = 0  # rollouts whose update was dropped (check_finite="skip")
        self.last_skip_reason: str | None = None
        self._episodes: EpisodeTracker | None = None
        self._guard = NonFiniteGuard(self.device)
        self.last_losses: dict[str, float] = {}

    def _use_fused_adam(self) -> None:
        """Replace skrl's Adam by the fused one: the same update rule in one kernel over all parameters.
        skrl's default on CPU steps parameter by parameter, which for the [2048, 1024, 1024, 512] network
        costs about as much as a bf16 minibatch forward and backward."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.optimizer = torch.optim.Adam(params, lr=self.cfg.learning_rate[0], fused=True)
        self.checkpoint_modules["optimizer"] = self.optimizer
        if self.scheduler is not None:
            self.scheduler = self.cfg.learning_rate_scheduler[0](
                self.optimizer, **self.cfg.learning_rate_scheduler_kwargs[0]
            )

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
        if self.check_finite != "off":
            self._guard.check(timestep, observations=next_observations, rewards=rewards)

        self._current_next_observations = next_observations
        self._current_next_states = next_states
        if self.cfg.rewards_shaper is not None:
            rewards = self.cfg.rewards_shaper(rewards, timestep, timesteps)

        if self.cfg.time_limit_bootstrap:
            if (self._rollout + 1) % self.cfg.rollouts:  # the next step reuses it, unless an update comes first
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
        if self.check_finite != "off":
            problem = self._pending_problem()
            if problem is not None:
                if self.check_finite == "raise":
                    raise NonFiniteError(problem)
                self._skip(problem)
                return
        snapshot = self._snapshot() if self.check_finite == "skip" else None
        self.shareable_calls += self.cfg.learning_epochs * self.cfg.mini_batches
        super().update(timestep=timestep, timesteps=timesteps)
        self.last_losses = {
            key.split(" / ")[1]: float(values[-1])
            for key, values in self.tracking_data.items()
            if key.startswith("Loss / ") and values
        }
        if self.check_finite != "off":
            problem = None
            if not all(map(math.isfinite, self.last_losses.values())):
                losses = ", ".join(f"{name} {value:.4g}" for name, value in self.last_losses.items())
                problem = (f"non-finite loss in the update after env step {timestep} (iteration "
                           f"{self._iteration(timestep)}){self._on_rank()}: {losses}")
            problem = distributed.first_report(problem, self.device)  # every rank decides the same
            if problem is not None:
                if self.check_finite == "raise":
                    raise NonFiniteError(problem)
                self._restore(snapshot)
                self._skip(problem)
                return
        self.track_data("Stats / Skipped updates", self.skipped_updates)

    # -- non-finite data ------------------------------------------------------------------------------------
    def raise_pending_nonfinite(self, cause: BaseException | None = None) -> None:
        """Raise :class:`NonFiniteError` if the guard holds a record (e.g. the task refused the NaN actions that
        a NaN observation produced: the report names the observation, where the problem started)."""
        if self.check_finite == "off":
            return
        found = self._guard.pop()
        if found is not None:
            message = self._describe(*found)
            if cause is not None:
                message += f"; the next step failed on it ({' '.join(str(cause).split())})"
            raise NonFiniteError(message)

    def _iteration(self, timestep: int) -> int:
        return timestep // self.cfg.rollouts + 1

    def _describe(self, step: int, env: int, name: str) -> str:
        rollouts = self.cfg.rollouts
        return (f"non-finite {name} at env step {step} (iteration {self._iteration(step)}, step "
                f"{step % rollouts + 1} of {rollouts} in the rollout), env index {env}{self._on_rank()}: "
                "check the task's dynamics and reward, or lower the learning rate")

    @staticmethod
    def _on_rank() -> str:
        return f" on rank {distributed.rank()}" if distributed.world_size() > 1 else ""

    def _pending_problem(self) -> str | None:
        """This rollout's first non-finite observation or reward, agreed between the ranks (every rank skips or
        raises together, or the next collective would wait forever)."""
        found = self._guard.pop()
        return distributed.first_report(self._describe(*found) if found is not None else None, self.device)

    def _skip(self, reason: str) -> None:
        self.skipped_updates += 1
        self.last_skip_reason = reason
        self.track_data("Stats / Skipped updates", self.skipped_updates)

    def _snapshot(self) -> dict[str, Any]:
        """What an update changes: modules (models, optimizer, preprocessors), GradScaler, scheduler."""
        modules, seen = {}, set()
        for name, module in self.checkpoint_modules.items():
            if module is not None and id(module) not in seen:  # a shared policy/value model is copied once
                seen.add(id(module))
                modules[name] = copy.deepcopy(module.state_dict())
        return {"modules": modules, "scaler": copy.deepcopy(self.scaler.state_dict()),
                "scheduler": copy.deepcopy(self.scheduler.state_dict()) if self.scheduler else None}

    def _restore(self, snapshot: dict[str, Any]) -> None:
        for name, state in snapshot["modules"].items():
            self.checkpoint_modules[name].load_state_dict(state)
        self.scaler.load_state_dict(snapshot["scaler"])
        if self.scheduler:
            self.scheduler.load_state_dict(snapshot["scheduler"])
