"""skrl's PPO with our own update, for the single-forward-pass model and a rollout free of host syncs.

What changes against ``skrl.agents.torch.ppo.PPO`` and why:

- ``update()`` is ours (:meth:`SFPPPO._ppo_update`): skrl 2.1.1's mathematics, pinned bit for bit by
  tests/test_agent.py, with less bookkeeping (one gather per epoch, contiguous minibatch slices, one
  normalisation of the observations for all epochs after the first, losses on the device until the end, the
  grad-norm clip folded into the fused Adam step). It clears the SFP caches itself at its start, after every
  optimizer step and at its end (a fused step bumps no version counter), and it *returns* its losses.
- ``record_transition`` keeps episode statistics on the device (skrl's base reads four numbers back to
  the host every step). Non-finite data are looked for once per rollout, at the update, in the memory: no
  work per step, and the report still names the first bad env step, env index and quantity.
- ``check_finite`` decides what a non-finite observation, reward or loss does: ``"raise"`` (default) stops
  with :class:`NonFiniteError`, ``"skip"`` drops that rollout's update (a non-finite loss rolls the update
  back) and counts it in ``skipped_updates``, ``"off"`` checks nothing.
- the time-limit bootstrap continues a truncated episode from its *final* observation where the env reports
  it, else from the current step's value (never from the next episode's first observation, which skrl uses);
  see ``_bootstrap_values``. It needs no host sync on CUDA.
- it counts the *shareable* trunk calls as they happen (the value call of each rollout step and of each
  minibatch that is stepped, and each bootstrap call the next step reuses: only where the env resets a step
  later, as OmniIsaacGymEnvs), the denominator of the cache hit rate that the runner reports.
- on CPU, mixed precision (bf16) runs without a GradScaler: bf16 needs no loss scaling.
- the agent saves and restores itself (:meth:`SFPPPO.state_dict`); skrl's private fields (``_rollout``,
  ``_current_*``, the preprocessors) are touched in this module only.
- in a multi-process run every decision that changes which collectives run (skip or raise, the episode
  statistics that decide ``best.pt``) is agreed between the ranks (:mod:`omni_sfp.compute.distributed`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import time
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import torch
import torch.nn.functional as F
from skrl import config as skrl_config
from skrl.agents.torch import Agent
from skrl.agents.torch.ppo import PPO
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space

from omni_sfp.compute import distributed
from omni_sfp.compute.optim import clip_and_step
from omni_sfp.config.schema import CHECK_FINITE
from omni_sfp.sfp.cache import SFPStats, sfp_modules
from omni_sfp.tasks.base import FINAL_OBSERVATIONS

# A sample above this many bytes is gathered a minibatch at a time in the update: a camera image (6 x 96 x 96
# floats, 221 KB) is, a flat observation (a few hundred bytes) is not; there is no size in between to tune
PER_MINIBATCH_GATHER_BYTES = 16 * 1024

# TensorBoard tags of the update's results (skrl's own tags, so the scalars read as skrl's would)
_TAGS = (
    ("Loss / Policy loss", "policy_loss"),
    ("Loss / Value loss", "value_loss"),
    ("Loss / Entropy loss", "entropy_loss"),
    ("Policy / Standard deviation", "std"),
    ("Learning / Learning rate", "learning_rate"),
)


class NonFiniteError(FloatingPointError):
    """Raised when observations, rewards or losses are NaN or infinite."""


def check_finite_mode(value: str | bool) -> str:
    """``train.check_finite`` as one of :data:`CHECK_FINITE` (``true``/``false`` of older configs: raise/off)."""
    if isinstance(value, bool):
        return "raise" if value else "off"
    if value not in CHECK_FINITE:
        raise ValueError(f"check_finite={value!r} is not one of {', '.join(CHECK_FINITE)}")
    return value


def compute_gae(
    *,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    discount_factor: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns and normalised advantages of a ``(steps, envs, 1)`` rollout by generalised advantage estimation.

    ``dones[t]`` cuts the recursion after step ``t`` (its next value is not bootstrapped); ``last_values`` is
    the value of the observations after the last step. The arithmetic is skrl 2.1.1's ``compute_gae``,
    operation for operation, so that results are bitwise equal (tests/test_agent.py): the advantage of step
    ``t`` is ``r_t - V_t + gamma * (1 - done_t) * (V_{t+1} + lambda * A_{t+1})``, the returns are
    ``A + V``, and the advantages are standardised over the whole rollout.
    """
    continues = dones.logical_not()
    advantages = torch.zeros_like(rewards)
    advantage = 0
    for t in reversed(range(rewards.shape[0])):
        next_values = last_values if t == rewards.shape[0] - 1 else values[t + 1]
        advantage = rewards[t] - values[t] + discount_factor * continues[t] * (next_values + gae_lambda * advantage)
        advantages[t] = advantage
    returns = advantages + values
    return returns, (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def _split_sizes(samples: int, parts: int) -> list[int]:
    """Minibatch sizes as skrl's memory splits its permutation (``numpy.array_split``: larger ones first)."""
    size, larger = divmod(samples, parts)
    return [size + 1] * larger + [size] * (parts - larger)


class EpisodeTracker:
    """Per-env running returns and lengths, and the sum/count of finished episodes, all on the device: six
    small kernels per step, on one ``(envs, 3)`` tensor whose columns are the return, the length and a 1 that
    counts an episode when the finished rows are summed."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.running = torch.zeros(num_envs, 3, device=device)
        self.running[:, 2] = 1
        self._fresh = self.running[:1].clone()  # an episode's first row: (0, 0, 1)
        self._increment = torch.zeros(num_envs, 3, device=device)  # a step's row: (reward, 1, 0)
        self._increment[:, 1] = 1
        self.finished = torch.zeros(3, device=device)  # sum of returns, sum of lengths, count

    def record(self, rewards: torch.Tensor, done: torch.Tensor) -> None:
        self._increment[:, :1].copy_(rewards.reshape(-1, 1))
        self.running += self._increment
        done = done.reshape(-1, 1)
        # where, not multiply: a NaN return (check_finite=skip/off) must not leak into other episodes
        self.finished += torch.where(done, self.running, 0.0).sum(dim=0)
        self.running = torch.where(done, self._fresh, self.running)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"returns": self.running[:, :1], "lengths": self.running[:, 1:2], "finished": self.finished}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.running[:, :1].copy_(state["returns"])
        self.running[:, 1:2].copy_(state["lengths"])
        self.finished.copy_(state["finished"])

    def pop(self) -> tuple[float | None, float | None, int]:
        """Mean return and length of the episodes finished since the last call, over all ranks (one host
        sync; one all-reduce in a multi-process run)."""
        distributed.all_reduce_sum_(self.finished)
        total_return, total_length, count = self.finished.tolist()
        self.finished.zero_()
        if not count:
            return None, None, 0
        return total_return / count, total_length / count, int(count)


def first_nonfinite(**series: torch.Tensor) -> tuple[int, int, str] | None:
    """The first ``(step, env index, name)`` whose data is not finite, in series shaped ``(steps, envs, ...)``
    with the same steps and envs (within one step, in the order given); None if all is finite. One host read.
    """
    names = list(series)
    bad = torch.stack(
        [~torch.isfinite(data.reshape(data.shape[0], data.shape[1], -1)).all(dim=2) for data in series.values()],
        dim=1,
    ).flatten()  # (steps, names, envs) flattened: the first True is the earliest step, then name, then env
    first = torch.argmax(bad.to(torch.uint8))  # argmax returns the first maximum
    found, index = torch.stack([bad[first].long(), first]).tolist()
    if not found:
        return None
    envs = next(iter(series.values())).shape[1]
    step, rest = divmod(index, len(names) * envs)
    return step, rest % envs, names[rest // envs]


def final_observations(infos: Any, next_observations: torch.Tensor, observation_space: Any) -> torch.Tensor | None:
    """The step's observations before the auto-reset, ``(N, d)`` like ``next_observations``, or None if the env
    does not report them.

    Read from the embedded tasks' ``infos["final_observations"]`` (a device tensor, no copy) or from
    Gymnasium's same-step autoreset info (``final_obs``, an object array set where ``_final_obs`` is true; host
    data anyway, so the rows are stacked on the host).
    """
    if not isinstance(infos, dict):
        return None
    final = infos.get(FINAL_OBSERVATIONS)
    if isinstance(final, torch.Tensor):
        return final if final.shape == next_observations.shape else final.reshape(next_observations.shape)
    if "final_obs" in infos and "_final_obs" in infos:
        mask = np.asarray(infos["_final_obs"], dtype=bool)
        if not mask.any():
            return next_observations
        rows = list(np.asarray(infos["final_obs"], dtype=object)[mask])
        batch = gymnasium.vector.utils.concatenate(
            observation_space, rows, gymnasium.vector.utils.create_empty_array(observation_space, len(rows))
        )
        values = flatten_tensorized_space(tensorize_space(observation_space, batch, device=next_observations.device))
        final = next_observations.clone()
        final[torch.as_tensor(mask, device=final.device)] = values.reshape(len(rows), -1).to(final.dtype)
        return final
    return None


def soft_action_bounds(action_space, device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """rl_games' soft bounds of the policy mean: 1.1 times the action range around its centre, per dimension
    (its actions live in [-1, 1], its bound is +-1.1); None for spaces without finite bounds."""
    low, high = getattr(action_space, "low", None), getattr(action_space, "high", None)
    if low is None or high is None or not (np.isfinite(low).all() and np.isfinite(high).all()):
        return None
    low, high = (torch.as_tensor(b, dtype=torch.float32, device=device) for b in (low, high))
    centre, half = (high + low) / 2, 1.1 * (high - low) / 2
    return centre - half, centre + half


def bounds_loss(mean_actions: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """rl_games' ``bound_loss``: the squared excess of the policy mean beyond the soft bounds, summed over the
    action dimensions, averaged over the batch. Beyond the env's clip every sampled action acts alike, so the
    surrogate alone has no gradient that brings a runaway mean back (and the deterministic policy, which plays
    the mean, stops matching the sampled one that was trained); this term has one."""
    excess = torch.relu(mean_actions - high) + torch.relu(low - mean_actions)
    return excess.square().sum(dim=-1).mean()


class SFPPPO(PPO):
    """skrl PPO for single-forward-pass models, with our own ``update()``; see the module docstring.

    :param check_finite: ``"raise"``, ``"skip"`` or ``"off"`` (``True``/``False`` mean raise/off).
    :param fused_optimizer: fused Adam, with the gradient-norm clip folded into its step.
    :param bounds_loss_scale: weight of rl_games' bound loss on the policy mean (0: none, as skrl's PPO).
    :param learning_rate_anneal: the learning rate (with ``KLAdaptiveLR``: its ``max_lr``) falls linearly to 0
        over the run, update by update, as openai/baselines' PPO.
    """

    def __init__(
        self,
        *args,
        check_finite: str | bool = "raise",
        fused_optimizer: bool = False,
        bounds_loss_scale: float = 0.0,
        learning_rate_anneal: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.bounds_loss_scale = float(bounds_loss_scale)
        self.learning_rate_anneal = bool(learning_rate_anneal)
        self._soft_bounds = soft_action_bounds(self.action_space, self.device) if self.bounds_loss_scale else None
        if fused_optimizer and self.optimizer is not None:
            self._use_fused_adam()
        if self.cfg.mixed_precision and self._device_type == "cpu":
            # bf16 has fp32's exponent range: loss scaling by a power of two changes no bit, it only costs an
            # unscale pass and an inf check (a host read) per minibatch
            self.scaler = torch.amp.GradScaler(device="cpu", enabled=False)
        self.check_finite = check_finite_mode(check_finite)
        self.shareable_calls = 0
        self.skipped_updates = 0  # rollouts whose update was dropped (check_finite="skip")
        self.last_skip_reason: str | None = None
        self.last_losses: dict[str, float] = {}
        self._episodes: EpisodeTracker | None = None
        self._recorded_steps = 0  # steps recorded since the last update (the memory's rows to check)
        self._first_recorded_step = 0  # the env step of the first of them
        models = {id(m): m for m in (self.policy, self.value) if m is not None}.values()
        self._caches = [cache for model in models for cache in sfp_modules(model)]
        self._trained_parameters = list({id(p): p for model in models for p in model.parameters()}.values())

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
        total = SFPStats()
        for cache in self._caches:
            total = total + cache.stats
        return total

    @property
    def shares_trunk(self) -> bool:
        """Whether a cache serves a role's trunk call from the other's (False: separate networks, roles on
        different inputs, or the double-pass baseline)."""
        return any(cache.cache_check != "off" for cache in self._caches)

    @contextlib.contextmanager
    def statistics_kept(self) -> Iterator[None]:
        """Calls made inside (the evaluation episodes) leave the caches' counters as they were: they are no
        policy/value pairs, so they are not counted as shareable, and a repeated input's hit must not count
        either (it raised the reported hit rate above 100% on a task whose frames repeat)."""
        saved = [dataclasses.replace(cache.stats) for cache in self._caches]
        try:
            yield
        finally:
            for cache, stats in zip(self._caches, saved):
                cache.stats = stats

    @property
    def sfp_share_rate(self) -> float:
        """Cache hits per shareable trunk call (1.0: every call that could be served was served)."""
        return self.sfp_stats.hits / self.shareable_calls if self.shareable_calls else 0.0

    @property
    def episodes(self) -> EpisodeTracker | None:
        """Running returns and lengths of the episodes in progress (None before the first step)."""
        return self._episodes

    @episodes.setter
    def episodes(self, tracker: EpisodeTracker | None) -> None:
        self._episodes = tracker

    def pop_episode_stats(self) -> tuple[float | None, float | None, int]:
        return self._episodes.pop() if self._episodes is not None else (None, None, 0)

    def purge_tensorboard_from(self, step: int) -> None:
        """Hide the TensorBoard events at steps >= ``step`` written before (a run resumed in its folder from an
        earlier checkpoint): a SessionLog START at ``step``, what torch's ``SummaryWriter(purge_step=step)``
        writes; skrl's writer has no such argument, so its private event writer is used, here only."""
        event_writer = getattr(getattr(self, "writer", None), "_event_file_writer", None)
        if event_writer is not None:
            from tensorboard.compat.proto.event_pb2 import Event, SessionLog

            start = SessionLog(status=SessionLog.START)
            event_writer.add_event(Event(step=step, wall_time=time.time(), session_log=start))

    def clear_caches(self) -> None:
        """Drop every cache entry: parameters are about to change, or just did (a fused optimizer step
        bumps no version counter, so the cache could not see it)."""
        for cache in self._caches:
            cache.clear()

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything an update changes or the next iteration reads: models, optimizer, normalisers,
        GradScaler, LR schedule, the rollout position and the counters (references: copy or save at once)."""
        modules = {
            name: module.state_dict()
            for name, module in self.checkpoint_modules.items()
            if module is not None and not (name == "value" and self.value is self.policy)  # shared: saved once
        }
        return {
            "modules": modules,
            "scaler": self.scaler.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "counters": {
                "rollout": self._rollout,
                "shareable_calls": self.shareable_calls,
                "skipped_updates": self.skipped_updates,
            },
            "sfp_stats": [[c.stats.hits, c.stats.misses, c.stats.bypasses] for c in self._caches],
        }

    def load_state_dict(self, state: dict[str, Any], *, models_only: bool = False) -> None:
        """Restore :meth:`state_dict`; ``models_only`` restores what acting needs (models, normalisers)."""
        for name, module_state in state["modules"].items():
            if models_only and name == "optimizer":
                continue
            self.checkpoint_modules[name].load_state_dict(module_state)
        self.clear_caches()
        if models_only:
            return
        self.scaler.load_state_dict(state["scaler"])
        if self.scheduler and state["scheduler"]:
            self.scheduler.load_state_dict(state["scheduler"])
        counters = state["counters"]
        self._rollout = counters["rollout"]
        self.shareable_calls = counters["shareable_calls"]
        self.skipped_updates = counters.get("skipped_updates", 0)
        if len(self._caches) == len(state["sfp_stats"]):
            for cache, (hits, misses, bypasses) in zip(self._caches, state["sfp_stats"]):
                cache.stats = SFPStats(hits, misses, bypasses)

    # -- skrl hooks ---------------------------------------------------------------------------------------
    def act(self, observations, states, *, timestep: int, timesteps: int):
        if self.training:
            self.shareable_calls += 1  # the value call, on the policy call's inputs
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
        self._current_next_observations = next_observations
        self._current_next_states = next_states
        if self.cfg.rewards_shaper is not None:
            rewards = self.cfg.rewards_shaper(rewards, timestep, timesteps)

        if self.cfg.time_limit_bootstrap:
            next_values = self._bootstrap_values(next_states, truncated, infos)
            if next_values is not None:
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
        self._rollout += 1  # steps recorded so far (skrl counts them in post_interaction, which our loop skips)
        if not self._recorded_steps:
            self._first_recorded_step = timestep
        self._recorded_steps += 1

    def _bootstrap_values(
        self, next_states: torch.Tensor | None, truncated: torch.Tensor, infos: Any
    ) -> torch.Tensor | None:
        """The value a truncated episode continues with, or None where no env truncated (known without a sync).

        A truncated episode's return continues from its *final* state. Every env here auto-resets, so the next
        observations of a finished env are the next episode's first: bootstrapping on them (skrl's PPO does)
        credits the ended episode with an unrelated state's value. So: V(final observation) where the env
        reports it (the embedded tasks' ``final_observations`` info, Gymnasium's ``final_obs``); else the
        current step's value V(s_t), already computed by ``act()``, as rl_games and rsl_rl do (Isaac Lab and
        OmniIsaacGymEnvs keep no final observation).
        """
        next_observations = self._current_next_observations
        final = final_observations(infos, next_observations, self.observation_space)
        if final is None:
            return self._current_values
        reusable = final is next_observations  # no env reset in this step (OmniIsaacGymEnvs resets in the next)
        if not reusable and self.device.type == "cpu" and not bool(truncated.any()):  # on CUDA this is a sync
            return None
        if reusable and (self._rollout + 1) % self.cfg.rollouts:  # the next step reuses it, unless an update comes
            self.shareable_calls += 1
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            inputs = {
                "observations": self._observation_preprocessor(final),
                "states": self._state_preprocessor(next_states),
            }
            values, _ = self.value.act(inputs, role="value")
        if not reusable:  # the next step sees other observations: drop the entry, so that step decides its miss
            for module in sfp_modules(self.value):  # without comparing tensors (a host sync on CUDA)
                module.clear()
        return self._value_preprocessor(values, inverse=True)

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        """skrl's hook, for code that drives the agent the skrl way (omni_sfp.ppo.loop calls :meth:`update`)."""
        if self.training and not self._rollout % self.cfg.rollouts:
            self.update(timestep=timestep, timesteps=timesteps)
        Agent.post_interaction(self, timestep=timestep, timesteps=timesteps)  # TensorBoard at write_interval

    def update(self, *, timestep: int, timesteps: int) -> dict[str, float]:
        """One PPO update on the rollout in memory; returns its losses and statistics (empty when skipped).

        Non-finite data (``check_finite``) is checked before (observations, rewards) and after (losses);
        with ``"skip"`` a non-finite loss rolls the whole update back.
        """
        problem = self._pending_problem() if self.check_finite != "off" else None
        self._recorded_steps = 0  # the next rollout starts (the memory's rows are overwritten from the first)
        if problem is not None:
            if self.check_finite == "raise":
                raise NonFiniteError(problem)
            self._skip(problem)
            return {}
        snapshot = self._snapshot() if self.check_finite == "skip" else None
        if self.learning_rate_anneal:
            self._anneal_learning_rate(timestep, timesteps)
        losses = self._ppo_update()
        if self.check_finite != "off":
            problem = None
            if not all(map(math.isfinite, losses.values())):
                shown = ", ".join(f"{name} {value:.4g}" for name, value in losses.items() if name.endswith("_loss"))
                problem = (
                    f"non-finite loss in the update after env step {timestep} (iteration "
                    f"{self._iteration(timestep)}){self._on_rank()}: {shown}"
                )
            problem = distributed.first_report(problem, self.device)  # every rank decides the same
            if problem is not None:
                if self.check_finite == "raise":
                    raise NonFiniteError(problem)
                self._restore(snapshot)
                self._skip(problem)
                return {}
        self.last_losses = losses
        for tag, key in _TAGS:
            if key in losses:
                self.track_data(tag, losses[key])
        self.track_data("Stats / Skipped updates", self.skipped_updates)
        return losses

    def _anneal_learning_rate(self, timestep: int, timesteps: int) -> None:
        """Scale the learning rate by the fraction of the run left, 1 at the first update and 1/N at the last
        of N (openai/baselines' PPO). With ``KLAdaptiveLR`` it is the schedule's ``max_lr`` that falls, and the
        current rate is held under it; the fraction is recomputed from the configured values each update, so
        a resumed run anneals as an uninterrupted one."""
        updates = max(timesteps // self.cfg.rollouts, 1)
        remaining = 1.0 - (self._iteration(timestep) - 1) / updates
        if isinstance(self.scheduler, KLAdaptiveLR):
            self.scheduler.max_lr = self.cfg.learning_rate_scheduler_kwargs[0]["max_lr"] * remaining
            for group in self.optimizer.param_groups:
                group["lr"] = min(group["lr"], self.scheduler.max_lr)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.learning_rate[0] * remaining

    def _ppo_update(self) -> dict[str, float]:
        """skrl 2.1.1's ``PPO.update`` mathematics (tests/test_agent.py pins it), with less bookkeeping.

        Same as skrl: the value of the last observations, GAE, the value normaliser trained on values then
        returns, one ``randperm`` per epoch from the same generator (so the same minibatches), epoch 0
        training the observation normaliser minibatch by minibatch, the same losses, one backward, clip, step,
        the KL early stop and the KL-adaptive LR once per epoch. Less bookkeeping: each epoch gathers the
        rollout once and slices contiguous minibatches (skrl gathers 7 tensors per minibatch; observations over
        ``PER_MINIBATCH_GATHER_BYTES`` a sample, images, are gathered per minibatch as skrl's); observations
        are normalised once for all epochs after the first; losses stay on the device until the end (one host
        read per update, plus one per epoch for the LR schedule and one per minibatch only with
        ``kl_threshold``); with fused Adam the grad-norm clip is the fused step's ``grad_scale``; the caches
        are cleared at the start, after every optimizer step and at the end.
        """
        cfg, autocast = self.cfg, functools.partial(torch.autocast, self._device_type, enabled=self.cfg.mixed_precision)
        self.clear_caches()
        self.enable_models_training_mode(True)

        # returns and advantages, once per update
        with torch.no_grad(), autocast():
            inputs = {
                "observations": self._observation_preprocessor(self._current_next_observations),
                "states": self._state_preprocessor(self._current_next_states),
            }
            self.value.enable_training_mode(False)
            last_values, _ = self.value.act(inputs, role="value")
            self.value.enable_training_mode(True)
            last_values = self._value_preprocessor(last_values, inverse=True)
        memory = self.memory
        values = memory.get_tensor_by_name("values")
        returns, advantages = compute_gae(
            rewards=memory.get_tensor_by_name("rewards"),
            dones=memory.get_tensor_by_name("terminated") | memory.get_tensor_by_name("truncated")
            if cfg.time_limit_bootstrap
            else memory.get_tensor_by_name("terminated"),
            values=values,
            last_values=last_values,
            discount_factor=cfg.discount_factor,
            gae_lambda=cfg.gae_lambda,
        )
        values = self._value_preprocessor(values, train=True)
        returns = self._value_preprocessor(returns, train=True)

        # the rollout as flat (samples, ...) tensors; the four per-sample scalars packed as rows
        observations = memory.get_tensor_by_name("observations").flatten(0, 1)
        states = memory.get_tensor_by_name("states").flatten(0, 1) if "states" in memory.tensors else None
        actions = memory.get_tensor_by_name("actions").flatten(0, 1)
        scalars = torch.stack(
            [memory.get_tensor_by_name("log_prob").flatten(), values.flatten(), returns.flatten(), advantages.flatten()]
        )
        samples = scalars.shape[1]
        sizes = _split_sizes(samples, cfg.mini_batches)
        # large samples (images) are gathered a minibatch at a time, as skrl does, and go to the trunk while they
        # are still in cache; small ones once an epoch (one gather instead of one per minibatch). The same rows.
        gather_per_minibatch = observations[0].numel() * observations.element_size() > PER_MINIBATCH_GATHER_BYTES
        normalised: tuple[torch.Tensor, torch.Tensor | None] | None = None

        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # policy, value, entropy loss
        kl_sum = torch.zeros((), device=self.device)
        steps = 0
        for epoch in range(cfg.learning_epochs):
            order = torch.randperm(samples, dtype=torch.long).to(self.device, non_blocking=True)  # skrl's draw
            if epoch == 0:  # epoch 0 trains the normalisers minibatch by minibatch, as skrl's does
                source_observations, source_states = observations, states
            else:
                if normalised is None:  # the statistics are final now: normalise every sample once
                    with autocast():
                        normalised = (self._observation_preprocessor(observations), self._state_preprocessor(states))
                source_observations, source_states = normalised[0], normalised[1] if states is not None else None
            if gather_per_minibatch:
                epoch_observations, epoch_states = source_observations, source_states
            else:
                epoch_observations = source_observations[order]
                epoch_states = source_states[order] if source_states is not None else None
            epoch_actions, epoch_scalars = actions[order], scalars[:, order]
            kls = []
            start = 0
            for size in sizes:
                batch = slice(start, start + size)
                start += size
                rows = order[batch] if gather_per_minibatch else batch
                old_log_prob, old_values, batch_returns, batch_advantages = (
                    row[batch].unsqueeze(-1) for row in epoch_scalars
                )
                with autocast():
                    if epoch == 0:
                        inputs = {
                            "observations": self._observation_preprocessor(epoch_observations[rows], train=True),
                            "states": self._state_preprocessor(
                                epoch_states[rows] if epoch_states is not None else None, train=True
                            ),
                        }
                    else:
                        inputs = {
                            "observations": epoch_observations[rows],
                            "states": epoch_states[rows] if epoch_states is not None else None,
                        }
                    _, outputs = self.policy.act({**inputs, "taken_actions": epoch_actions[batch]}, role="policy")
                    log_prob = outputs["log_prob"]
                    with torch.no_grad():  # approximate KL divergence
                        ratio = log_prob - old_log_prob
                        kl = ((torch.exp(ratio) - 1) - ratio).mean()
                        kls.append(kl)
                    if cfg.kl_threshold and kl > cfg.kl_threshold:  # early stop: a host read, only when enabled
                        break
                    if cfg.entropy_loss_scale:
                        entropy_loss = -cfg.entropy_loss_scale * self.policy.get_entropy(role="policy").mean()
                    else:
                        entropy_loss = 0
                    ratio = torch.exp(log_prob - old_log_prob)
                    surrogate = batch_advantages * ratio
                    surrogate_clipped = batch_advantages * torch.clip(ratio, 1.0 - cfg.ratio_clip, 1.0 + cfg.ratio_clip)
                    policy_loss = -torch.min(surrogate, surrogate_clipped).mean()

                    predicted_values, _ = self.value.act(inputs, role="value")
                    self.shareable_calls += 1  # counted as it happens: an early stop above makes none
                    if cfg.value_clip > 0:
                        predicted_values = old_values + torch.clip(
                            predicted_values - old_values, min=-cfg.value_clip, max=cfg.value_clip
                        )
                    value_loss = cfg.value_loss_scale * F.mse_loss(batch_returns, predicted_values)
                    bound_loss = 0  # rl_games' b_loss: in the backward, not in the reported policy loss
                    if self._soft_bounds is not None:
                        bound_loss = self.bounds_loss_scale * bounds_loss(outputs["mean_actions"], *self._soft_bounds)

                self.optimizer.zero_grad()
                self.scaler.scale(policy_loss + entropy_loss + value_loss + bound_loss).backward()
                if skrl_config.torch.is_distributed:
                    self.policy.reduce_parameters()
                    if self.policy is not self.value:
                        self.value.reduce_parameters()
                self._clip_and_step()
                self.clear_caches()
                entropy = (
                    entropy_loss.detach() if torch.is_tensor(entropy_loss) else torch.zeros((), device=self.device)
                )
                totals += torch.stack([policy_loss.detach(), value_loss.detach(), entropy]).double()
                kl_sum += kl
                steps += 1

            if self.scheduler:  # once per epoch, as skrl's
                if isinstance(self.scheduler, KLAdaptiveLR):
                    kl = torch.stack(kls).mean()
                    if skrl_config.torch.is_distributed:
                        torch.distributed.all_reduce(kl, op=torch.distributed.ReduceOp.SUM)
                        kl /= skrl_config.torch.world_size
                    self.scheduler.step(kl.item())
                else:
                    self.scheduler.step()

        self.enable_models_training_mode(False)
        self.clear_caches()
        distribution = self.policy.distribution(role="policy")
        gaussian = isinstance(distribution, torch.distributions.Normal)  # a Categorical's stddev is NaN
        std = distribution.stddev.mean() if gaussian else torch.zeros((), device=self.device)
        policy_loss, value_loss, entropy_loss, kl, std = torch.cat(
            [totals / max(steps, 1), (kl_sum / max(steps, 1)).double().reshape(1), std.double().reshape(1)]
        ).tolist()
        losses = {"policy_loss": policy_loss, "value_loss": value_loss}
        if cfg.entropy_loss_scale:
            losses["entropy_loss"] = entropy_loss
        losses.update(kl=kl, **({"std": std} if gaussian else {}))
        losses.update(learning_rate=self.optimizer.param_groups[0]["lr"], minibatches=steps)
        return losses

    def _clip_and_step(self) -> None:
        clip_and_step(self.optimizer, self._trained_parameters, self.cfg.grad_norm_clip, self.scaler)

    # -- non-finite data ------------------------------------------------------------------------------------
    def raise_pending_nonfinite(self, cause: BaseException | None = None) -> None:
        """Raise :class:`NonFiniteError` if the steps recorded so far hold non-finite data (e.g. the task refused the NaN actions that
        a NaN observation produced: the report names the observation, where the problem started)."""
        if self.check_finite == "off":
            return
        found = self._rollout_nonfinite()
        if found is not None:
            message = self._describe(*found)
            if cause is not None:
                message += f"; the next step failed on it ({' '.join(str(cause).split())})"
            raise NonFiniteError(message)

    def _iteration(self, timestep: int) -> int:
        return timestep // self.cfg.rollouts + 1

    def _describe(self, step: int, env: int, name: str) -> str:
        rollouts = self.cfg.rollouts
        return (
            f"non-finite {name} at env step {step} (iteration {self._iteration(step)}, step "
            f"{step % rollouts + 1} of {rollouts} in the rollout), env index {env}{self._on_rank()}: "
            "check the task's dynamics and reward, or lower the learning rate"
        )

    @staticmethod
    def _on_rank() -> str:
        return f" on rank {distributed.rank()}" if distributed.world_size() > 1 else ""

    def _rollout_nonfinite(self) -> tuple[int, int, str] | None:
        """``(env step, env index, quantity)`` of the first non-finite next observation or reward among the steps
        recorded since the last update, read from the memory once (nothing is checked per step). A step's next
        observations are what the step after it acted on (the memory's next row); the last step's are
        ``_current_next_observations``. The rewards are the memory's (the time-limit bootstrap added)."""
        recorded = self._recorded_steps
        if not recorded:
            return None
        observations = self.memory.get_tensor_by_name("observations")
        last = self._current_next_observations.reshape(1, observations.shape[1], -1).to(observations.dtype)
        found = first_nonfinite(
            observations=torch.cat([observations[1:recorded], last]),
            rewards=self.memory.get_tensor_by_name("rewards")[:recorded],
        )
        return None if found is None else (self._first_recorded_step + found[0], *found[1:])

    def _pending_problem(self) -> str | None:
        """This rollout's first non-finite observation or reward, agreed between the ranks (every rank skips or
        raises together, or the next collective would wait forever)."""
        found = self._rollout_nonfinite()
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
        return {
            "modules": modules,
            "scaler": copy.deepcopy(self.scaler.state_dict()),
            "scheduler": copy.deepcopy(self.scheduler.state_dict()) if self.scheduler else None,
        }

    def _restore(self, snapshot: dict[str, Any]) -> None:
        for name, state in snapshot["modules"].items():
            self.checkpoint_modules[name].load_state_dict(state)
        self.clear_caches()
        self.scaler.load_state_dict(snapshot["scaler"])
        if self.scheduler:
            self.scheduler.load_state_dict(snapshot["scheduler"])
