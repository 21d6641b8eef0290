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
- a recurrent model (skrl's RNN protocol: ``get_specification()["rnn"]``, e.g. :mod:`omni_sfp.sfp.recurrent`) trains
  with skrl ``PPO_RNN``'s semantics (tests/test_recurrent_agent.py pins it): the hidden states before each step
  are stored with it, zeroed where an episode ends, and the update runs on sequences (:class:`SequenceSampler`).
  Where ours differs it is our PPO's: GAE cuts at a truncation too (with ``time_limit_bootstrap``; ``PPO_RNN``
  cuts at terminations only), and a truncated episode is bootstrapped from the step's value V(s_t) (as
  ``PPO_RNN``), the hidden state after the final observation being the next episode's.
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
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import numpy as np
import torch
from skrl import config as skrl_config
from skrl.agents.torch import Agent
from skrl.agents.torch.ppo import PPO
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space

from omni_sfp.compute import distributed
from omni_sfp.compute.capture import CaptureError, GraphedStep, compile_step
from omni_sfp.compute.device import read_back
from omni_sfp.config.schema import CHECK_FINITE, ConfigError
from omni_sfp.ppo.minibatches import RolloutSampler, SequenceSampler
from omni_sfp.ppo.step import STATISTICS, DeviceLearningRate, MinibatchStep
from omni_sfp.sfp.cache import SFPStats, capture_key, sfp_modules
from omni_sfp.tasks.base import FINAL_OBSERVATIONS

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

    def take(self) -> torch.Tensor:
        """The sums of the episodes finished since the last call, over all ranks (one all-reduce in a multi-process
        run), as a device tensor (return, length, count): read it with :meth:`decode`, alone or with other results."""
        distributed.all_reduce_sum_(self.finished)
        finished = self.finished.clone()
        self.finished.zero_()
        return finished

    @staticmethod
    def decode(sums: list[float]) -> tuple[float | None, float | None, int]:
        """Mean return, mean length and count from :meth:`take`'s values."""
        total_return, total_length, count = sums
        if not count:
            return None, None, 0
        return total_return / count, total_length / count, int(count)

    def pop(self) -> tuple[float | None, float | None, int]:
        """Mean return and length of the episodes finished since the last call, over all ranks (one host read)."""
        return self.decode(read_back(self.take()))


def nonfinite_search(**series: torch.Tensor) -> torch.Tensor:
    """Where the first non-finite value is, in series shaped ``(steps, envs, ...)`` with the same steps and envs
    (within one step, in the order given), as a device tensor ``(found, flat index)``: read it with
    :func:`decode_nonfinite`, alone or with other results. No host read."""
    bad = torch.stack(
        [~torch.isfinite(data.reshape(data.shape[0], data.shape[1], -1)).all(dim=2) for data in series.values()],
        dim=1,
    ).flatten()  # (steps, names, envs) flattened: the first True is the earliest step, then name, then env
    first = torch.argmax(bad.to(torch.uint8))  # argmax returns the first maximum
    return torch.stack([bad.any().long(), first])


def decode_nonfinite(found_index: list[int], names: list[str], envs: int) -> tuple[int, int, str] | None:
    """``(step, env index, name)`` from :func:`nonfinite_search`'s values; None if all was finite."""
    found, index = found_index
    if not found:
        return None
    step, rest = divmod(int(index), len(names) * envs)
    return step, rest % envs, names[rest // envs]


def first_nonfinite(**series: torch.Tensor) -> tuple[int, int, str] | None:
    """The first ``(step, env index, name)`` whose data is not finite (see :func:`nonfinite_search`); None if all
    is finite. One host read."""
    envs = next(iter(series.values())).shape[1]
    return decode_nonfinite(read_back(nonfinite_search(**series)), list(series), envs)


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
        rnn = self.policy.get_specification().get("rnn", {}) if self.policy is not None else {}
        self.sequence_length = int(rnn.get("sequence_length", 1))
        self._rnn_sizes = [tuple(size) for size in rnn.get("sizes", [])]  # (layers, envs, hidden) per state
        self.recurrent = bool(self._rnn_sizes)
        # which of the hidden states each role reads: the policy's first, then a separate value model's (PPO_RNN's
        # rnn_policy_<i> and rnn_value_<i>); a shared model's roles read the same
        self._rnn_roles = {"policy": slice(0, len(self._rnn_sizes)), "value": slice(0, len(self._rnn_sizes))}
        if self.value is not None and self.value is not self.policy:
            value_rnn = self.value.get_specification().get("rnn", {})
            value_sizes = [tuple(size) for size in value_rnn.get("sizes", [])]
            if bool(value_sizes) != self.recurrent or (
                value_sizes and value_rnn.get("sequence_length", 1) != self.sequence_length
            ):
                raise ValueError("SFPPPO: the policy and a separate value model are both recurrent or neither is, "
                                 "with one sequence_length")  # fmt: skip
            self._rnn_roles["value"] = slice(len(self._rnn_sizes), len(self._rnn_sizes) + len(value_sizes))
            self._rnn_sizes += value_sizes
        if len({(layers, hidden) for layers, _, hidden in self._rnn_sizes}) > 1:
            raise ValueError("SFPPPO: every hidden state of a recurrent model has one size (num_layers, hidden_size)")
        if self.recurrent and self.cfg.rollouts % self.sequence_length:
            raise ConfigError(
                f"train.ppo.rollouts ({self.cfg.rollouts}) must be a multiple of the recurrent network's "
                f"sequence_length ({self.sequence_length}): the update trains on whole sequences"
            )
        sequences = self.cfg.rollouts // self.sequence_length * (self.memory.num_envs if self.memory is not None else 0)
        if self.recurrent and self.memory is not None and sequences < self.cfg.mini_batches:
            raise ConfigError(
                f"train.ppo.mini_batches ({self.cfg.mini_batches}) is more than the rollout's {sequences} sequences of "
                f"{self.sequence_length} steps (num_envs x rollouts / sequence_length)"
            )
        self._rnn_states: list[torch.Tensor] | None = None  # the hidden states the next act starts from
        self._rnn_after: list[torch.Tensor] | None = None  # the hidden states after the last act
        models = {id(m): m for m in (self.policy, self.value) if m is not None}.values()
        self._models = list(models)
        self._caches = [cache for model in models for cache in sfp_modules(model)]
        self._trained_parameters = list({id(p): p for model in models for p in model.parameters()}.values())
        # fused Adam takes its rate as a device tensor: the KL-adaptive rule then runs on the device
        fused = self.optimizer is not None and bool(self.optimizer.defaults.get("fused"))
        self._device_rate = DeviceLearningRate(self.optimizer, self.scheduler, self.device) if fused else None
        self._step = MinibatchStep(
            policy=self.policy,
            value=self.value,
            optimizer=self.optimizer,
            scaler=self.scaler,
            cfg=self.cfg,
            autocast=functools.partial(torch.autocast, self._device_type, enabled=self.cfg.mixed_precision),
            parameters=self._trained_parameters,
            caches=self._caches,
            soft_bounds=self._soft_bounds,
            bounds_loss_scale=self.bounds_loss_scale,
            reduce_gradients=self._reduce_gradients if skrl_config.torch.is_distributed else None,
            device=self.device,
            hidden_roles=(self._rnn_roles["policy"], self._rnn_roles["value"]) if self.recurrent else None,
        )
        # CUDA's path: no host read in a rollout step, one per update (tests force it on the CPU)
        self.sync_free = self.device.type == "cuda"
        self.last_episodes: tuple[float | None, float | None, int] = (None, None, 0)
        self.capture = "off"  # how the minibatch step runs: off (eager), compile, graph (compiled, in a CUDA graph)
        self._graphed: GraphedStep | None = None
        self._step_counts: list[SFPStats] | None = None  # what one eager step added to each cache's counters
        self._checked: set[str] = (
            set()
        )  # the captured calls (step, act) run once since the capture: a failure falls back
        self._captured_act: Callable | None = None  # the act pair, compiled (or graphed) with the step
        self._act_counts: list[SFPStats] | None = None  # what one eager act pair added to each cache's counters
        self.capture_fallback: Callable[[str], None] | None = None  # None: a step that fails to capture raises

    def init(self, *, trainer_cfg: dict[str, Any] | None = None) -> None:
        """skrl's init (memory tensors, writer); for a recurrent model also a memory tensor per hidden state
        (``rnn_<i>``, the state before each step, as ``PPO_RNN`` stores it) and zero states to start from."""
        super().init(trainer_cfg=trainer_cfg)
        if self.recurrent:
            if self.memory is not None:
                for i, (layers, _, hidden) in enumerate(self._rnn_sizes):
                    self.memory.create_tensor(
                        name=f"rnn_{i}", size=(layers, hidden), dtype=torch.float32, keep_dimensions=True
                    )
            self.reset_hidden_states()

    def reset_hidden_states(self, num_envs: int | None = None) -> None:
        """Zero hidden states for ``num_envs`` envs (the specification's by default): every episode starts again."""
        self._rnn_states = [
            torch.zeros(layers, envs if num_envs is None else num_envs, hidden, device=self.device)
            for layers, envs, hidden in self._rnn_sizes
        ]
        self._rnn_after = None

    def _advance_hidden(self, done: torch.Tensor) -> None:
        """The next step's hidden states: the last act's, zeroed where the episode ended (no host read)."""
        if self._rnn_after is not None:
            keep = done.reshape(1, -1, 1).logical_not()
            self._rnn_states = [torch.where(keep, state, 0.0) for state in self._rnn_after]
            self._rnn_after = None

    @contextlib.contextmanager
    def hidden_states_kept(self) -> Iterator[None]:
        """Calls made inside (the evaluation episodes, on their own env) start from zero hidden states and leave the
        training rollout's as they were."""
        saved = (self._rnn_states, self._rnn_after)
        try:
            if self.recurrent:
                self._rnn_states = None  # sized at the first act
            yield
        finally:
            self._rnn_states, self._rnn_after = saved

    def _use_fused_adam(self) -> None:
        """Replace skrl's Adam by the fused one: the same update rule in one kernel over all parameters.
        skrl's default on CPU steps parameter by parameter, which for the [2048, 1024, 1024, 512] network
        costs about as much as a bf16 minibatch forward and backward."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        # capturable: a CUDA graph may record its step (the fused kernel reads its step count and rate on the device
        # either way, so the arithmetic is the same)
        self.optimizer = torch.optim.Adam(params, lr=self.cfg.learning_rate[0], fused=True, capturable=True)
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
            # a recurrent model's hidden states of the rollout in progress (resumed, the rollout continues from them)
            "rnn_states": list(self._rnn_states) if self.recurrent and self._rnn_states is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any], *, models_only: bool = False) -> None:
        """Restore :meth:`state_dict`; ``models_only`` restores what acting needs (models, normalisers)."""
        for name, module_state in state["modules"].items():
            if models_only and name == "optimizer":
                continue
            self.checkpoint_modules[name].load_state_dict(module_state)
        self.clear_caches()
        if self._device_rate is not None:
            self._device_rate.attach()  # the loaded groups hold a number (or a tensor of the saving run)
        self._reset_graphs()  # the loaded optimizer state lives in new tensors
        if models_only:
            return
        self.scaler.load_state_dict(state["scaler"])
        if self.scheduler and state["scheduler"]:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.recurrent:
            states = state.get("rnn_states")
            if states is not None and [tuple(s.shape) for s in states] == [tuple(s) for s in self._rnn_sizes]:
                self._rnn_states = [s.to(self.device) for s in states]
            else:
                self.reset_hidden_states()  # a checkpoint without them: every episode's memory restarts
        counters = state["counters"]
        self._rollout = counters["rollout"]
        self.shareable_calls = counters["shareable_calls"]
        self.skipped_updates = counters.get("skipped_updates", 0)
        if len(self._caches) == len(state["sfp_stats"]):
            for cache, (hits, misses, bypasses) in zip(self._caches, state["sfp_stats"]):
                cache.stats = SFPStats(hits, misses, bypasses)

    # -- skrl hooks ---------------------------------------------------------------------------------------
    def act(self, observations, states, *, timestep: int, timesteps: int):
        """skrl's act; while training, the policy and value pair as one function of tensors (:meth:`_act_pair`),
        captured with the minibatch step (compiled, in a CUDA graph on CUDA). The first act of a process is eager:
        the caches' counters show what one pair counts, and a captured pair counts the same."""
        if not self.training:
            if self.recurrent:
                return self._recurrent_play(observations, states)
            return super().act(observations, states, timestep=timestep, timesteps=timesteps)
        self.shareable_calls += 1  # the value call, on the policy call's inputs
        if self._act_counts is None or self._captured_act is None:
            before = [dataclasses.replace(cache.stats) for cache in self._caches]
            actions, log_prob, values, mean_actions = self._act_pair(observations, states)
            if self._act_counts is None:
                self._act_counts = [cache.stats - b for cache, b in zip(self._caches, before)]
        else:
            captured = self._captured_act
            actions, log_prob, values, mean_actions = self._captured(
                "act",
                lambda: captured(observations, states),
                self._act_counts,
                lambda: self._act_pair(observations, states),
            )
        self._current_log_prob, self._current_values = log_prob, values
        return actions, {"log_prob": log_prob, "mean_actions": mean_actions}

    def _recurrent_play(self, observations: torch.Tensor, states: torch.Tensor | None):
        """A recurrent policy acting outside training (evaluation): the policy alone, its hidden states carried to
        the next call (:meth:`end_episodes` zeroes those whose episode ended)."""
        if self._rnn_states is None or self._rnn_states[0].shape[1] != observations.shape[0]:
            self.reset_hidden_states(observations.shape[0])
        part = self._rnn_roles["policy"]
        inputs = {
            "observations": self._observation_preprocessor(observations),
            "states": self._state_preprocessor(states),
            "rnn": self._rnn_states[part],
        }
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            actions, outputs = self.policy.act(inputs, role="policy")
        self._rnn_states[part], self._rnn_after = list(outputs["rnn"]), None
        return actions, outputs

    def end_episodes(self, done: torch.Tensor) -> None:
        """Where ``done``, the next act starts a new episode: a recurrent model's hidden states are zeroed (a
        player that drives the policy without :meth:`record_transition` calls it)."""
        if self.recurrent and self._rnn_states is not None:
            self._rnn_after, self._rnn_states = self._rnn_states, None
            self._advance_hidden(done)

    def _act_pair(
        self, observations: torch.Tensor, states: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """skrl's ``PPO.act`` while training, as a function of tensors: the actions, their log-probability, the
        (unnormalised) value and the deterministic action (``mean_actions``, which a player of the policy reads as
        it reads skrl's act outputs); the value call is served the policy call's trunk (eagerly by the cache's key, in a
        traced graph by identity)."""
        inputs = {
            "observations": self._observation_preprocessor(observations),
            "states": self._state_preprocessor(states),
        }
        if self.recurrent:  # both roles on the same hidden states (PPO_RNN's value call reads the policy's)
            if self._rnn_states is None or self._rnn_states[0].shape[1] != observations.shape[0]:
                self.reset_hidden_states(observations.shape[0])
            inputs["rnn"] = self._rnn_states[self._rnn_roles["policy"]]
        value_inputs = inputs
        if self.recurrent and self.value is not self.policy:  # a separate value model has hidden states of its own
            value_inputs = {**inputs, "rnn": self._rnn_states[self._rnn_roles["value"]]}
        with torch.autocast(device_type=self._device_type, enabled=self.cfg.mixed_precision):
            actions, outputs = self.policy.act(inputs, role="policy")
            values, value_outputs = self.value.act(value_inputs, role="value")
            values = self._value_preprocessor(values, inverse=True)
        if self.recurrent:
            after = list(self._rnn_states)
            after[self._rnn_roles["policy"]] = outputs["rnn"]
            if self.value is not self.policy:
                after[self._rnn_roles["value"]] = value_outputs["rnn"]
            self._rnn_after = after
        for cache in self._caches:
            cache.end_graph()
        return actions, outputs["log_prob"], values, outputs["mean_actions"]

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
            self.end_episodes(terminated | truncated)
            return
        self._current_next_observations = next_observations
        self._current_next_states = next_states
        if self.cfg.rewards_shaper is not None:
            rewards = self.cfg.rewards_shaper(rewards, timestep, timesteps)

        if self.cfg.time_limit_bootstrap:
            next_values = self._bootstrap_values(next_states, truncated, infos)
            if next_values is not None:
                rewards = rewards + self.cfg.discount_factor * next_values * truncated

        hidden = {}
        if self.recurrent:  # the states this step started from, (envs, layers, hidden) as PPO_RNN stores them
            hidden = {f"rnn_{i}": state.transpose(0, 1) for i, state in enumerate(self._rnn_states)}
        self.memory.add_samples(
            observations=observations,
            states=states,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            log_prob=self._current_log_prob,
            values=self._current_values,
            **hidden,
        )
        if self.recurrent:
            self._advance_hidden(terminated | truncated)
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
        if final is None or self.recurrent:  # recurrent: the final observation's hidden state is not kept
            return self._current_values
        reusable = final is next_observations  # no env reset in this step (OmniIsaacGymEnvs resets in the next)
        if not reusable and not self.sync_free and not bool(truncated.any()):  # a sync on CUDA: not there
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
        """One PPO update on the rollout in memory; returns its losses and statistics (empty when skipped), and
        keeps the episodes that finished since the last update in :attr:`last_episodes`.

        One host read carries everything: the losses, the rate, the episodes and, on the sync-free path
        (:attr:`sync_free`), whether the rollout's data were finite. Non-finite data (``check_finite``): on the
        host path they are looked for before the update (one more read, free on the CPU), so that it never runs
        on them; on the sync-free path in the same read, after it: ``"raise"`` stops there, ``"skip"`` rolls the
        update back as for a non-finite loss.
        """
        episodes = self._episodes.take() if self._episodes is not None else torch.zeros(3, device=self.device)
        search = self._rollout_nonfinite_search() if self.check_finite != "off" else None
        recorded_from = self._first_recorded_step
        self._recorded_steps = 0  # the next rollout starts (the memory's rows are overwritten from the first)
        if search is not None and not self.sync_free:
            found, index = read_back(search)
            problem = distributed.first_report(self._data_problem([found, index], recorded_from), self.device)
            if problem is not None:
                if self.check_finite == "raise":
                    raise NonFiniteError(problem)
                self.last_episodes = EpisodeTracker.decode(read_back(episodes))
                self._skip(problem)
                return {}
            search = None
        snapshot = self._snapshot() if self.check_finite == "skip" else None
        if self.learning_rate_anneal:
            self._anneal_learning_rate(timestep, timesteps)
        results, steps, gaussian = self._ppo_update()
        parts = [results, episodes.double()] + ([search.double()] if search is not None else [])
        values = read_back(torch.cat(parts))  # the update's one host read
        count = len(results)
        self.last_episodes = EpisodeTracker.decode(values[count : count + 3])
        losses = self._losses(values[:count], steps, gaussian)
        if self.check_finite != "off":
            problem = self._data_problem(values[count + 3 :], recorded_from) if search is not None else None
            if problem is None and not all(map(math.isfinite, losses.values())):
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

    def _losses(self, values: list[float], steps: int, gaussian: bool) -> dict[str, float]:
        """The update's results by name, from :meth:`_ppo_update`'s values as read back."""
        results = dict(zip(STATISTICS, values))
        losses = {"policy_loss": results["policy_loss"], "value_loss": results["value_loss"]}
        if self.cfg.entropy_loss_scale:
            losses["entropy_loss"] = results["entropy_loss"]
        losses.update(kl=results["kl"], **({"std": values[len(STATISTICS)]} if gaussian else {}))
        if self._device_rate is not None:
            learning_rate = values[len(STATISTICS) + 1]
            self._device_rate.report(learning_rate)
        else:
            learning_rate = self.optimizer.param_groups[0]["lr"]
        losses.update(learning_rate=learning_rate, minibatches=steps)
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
            if self._device_rate is not None:
                self._device_rate.set(self.scheduler.max_lr, at_most=True)
                return
            for group in self.optimizer.param_groups:
                group["lr"] = min(group["lr"], self.scheduler.max_lr)
        elif self._device_rate is not None:
            self._device_rate.set(self.cfg.learning_rate[0] * remaining)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.learning_rate[0] * remaining

    def _ppo_update(self) -> tuple[torch.Tensor, int, bool]:
        """skrl 2.1.1's ``PPO.update`` mathematics (tests/test_agent.py pins it), as a loop over minibatches.

        Per update: the value of the last observations, GAE, the value normaliser trained on values then returns
        (as skrl). Then epochs x minibatches from :class:`~omni_sfp.ppo.minibatches.RolloutSampler` (skrl's
        permutations; the sampling bookkeeping lives there), each through :class:`~omni_sfp.ppo.step.MinibatchStep`
        (the loss, backward, clip, step; eager, compiled or replayed from a CUDA graph: :attr:`capture`), and the
        KL-adaptive rate once per epoch. The losses and the KL stay on the device: one host read per update, plus
        one per epoch for a KL-adaptive rate on the host (an optimizer that is not fused) and one per minibatch
        only with ``kl_threshold`` (its early stop). The caches are cleared at the start, after every optimizer
        step and at the end.
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
            if self.recurrent:
                inputs["rnn"] = self._rnn_states[self._rnn_roles["value"]]
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

        sampler_class, sequences = RolloutSampler, {}
        if self.recurrent:
            sampler_class = SequenceSampler
            sequences = {
                "hidden": torch.stack(
                    [memory.get_tensor_by_name(f"rnn_{i}").flatten(0, 1) for i in range(len(self._rnn_sizes))]
                ),
                "terminated": memory.get_tensor_by_name("terminated").flatten(0, 1),
                "truncated": memory.get_tensor_by_name("truncated").flatten(0, 1),
                "steps": memory.memory_size,
                "envs": memory.num_envs,
                "sequence_length": self.sequence_length,
            }
        sampler = sampler_class(
            **sequences,
            observations=memory.get_tensor_by_name("observations").flatten(0, 1),
            states=memory.get_tensor_by_name("states").flatten(0, 1) if "states" in memory.tensors else None,
            actions=memory.get_tensor_by_name("actions").flatten(0, 1),
            scalars=torch.stack(
                [
                    memory.get_tensor_by_name("log_prob").flatten(),
                    values.flatten(),
                    returns.flatten(),
                    advantages.flatten(),
                ]
            ),
            mini_batches=cfg.mini_batches,
            normalise_observations=self._observation_preprocessor,
            normalise_states=self._state_preprocessor,
            autocast=autocast,
        )
        step = self._step
        step.reset()
        steps = 0
        for epoch in range(cfg.learning_epochs):
            step.epoch_kl.zero_()
            kls = 0  # KLs summed into step.epoch_kl this epoch
            for batch in sampler.epoch(epoch):
                self.shareable_calls += 1  # the value call, counted as it happens
                kls += 1
                if cfg.kl_threshold:  # early stop: a host read per minibatch, so never captured
                    loss, statistics = step.losses(batch)
                    if statistics[3] > cfg.kl_threshold:
                        step.epoch_kl += statistics[3]
                        break
                    step.apply(loss, statistics)
                else:
                    self._run_step(batch)
                self.clear_caches()
                steps += 1

            if self.scheduler:  # once per epoch, as skrl's
                if isinstance(self.scheduler, KLAdaptiveLR):
                    kl = step.epoch_kl / kls
                    if skrl_config.torch.is_distributed:
                        torch.distributed.all_reduce(kl, op=torch.distributed.ReduceOp.SUM)
                        kl /= skrl_config.torch.world_size
                    if self._device_rate is not None:
                        self._device_rate.adapt(kl)
                    else:
                        self.scheduler.step(kl.item())
                elif self._device_rate is None:
                    self.scheduler.step()

        self.enable_models_training_mode(False)
        self.clear_caches()
        distribution = self.policy.distribution(role="policy")
        gaussian = isinstance(distribution, torch.distributions.Normal)  # a Categorical's stddev is NaN
        std = distribution.stddev.mean() if gaussian else torch.zeros((), device=self.device)
        rate = self._device_rate.rate if self._device_rate is not None else torch.zeros((), device=self.device)
        results = torch.cat([step.totals / max(steps, 1), std.double().reshape(1), rate.double().reshape(1)])
        return results, steps, gaussian

    # -- the minibatch step: eager or captured -------------------------------------------------------------------
    def _run_step(self, batch) -> None:
        """One minibatch through the step as :attr:`capture` says. The first step of a process is always eager:
        it creates the optimizer's state, and the caches' counters show that the pair shares its trunk."""
        if self._step_counts is None:
            before = [dataclasses.replace(cache.stats) for cache in self._caches]
            self._step.losses = self._step.loss  # eager, whatever the capture
            self._step(*batch.tensors())
            self._step_counts = [cache.stats - b for cache, b in zip(self._caches, before)]
            self.set_capture(self.capture)
            return
        if self.capture == "off":
            self._step(*batch.tensors())
            return
        step = self._graphed if self._graphed is not None else self._step
        self._captured("step", lambda: step(*batch.tensors()), self._step_counts, lambda: self._step(*batch.tensors()))

    def _captured(self, kind: str, call: Callable[[], Any], counts: list[SFPStats], eager: Callable[[], Any]) -> Any:
        """A captured call, counted as its eager twin counted (a captured call counts nothing itself). The first
        call of each kind after a capture is checked: one that cannot be compiled or graphed raises
        :class:`CaptureError`, or, with a :attr:`capture_fallback`, reports why and runs ``eager`` instead."""
        saved = [dataclasses.replace(cache.stats) for cache in self._caches]
        if kind in self._checked:
            result = call()
        else:
            try:
                result = call()
            except CaptureError:
                raise
            except Exception as error:  # noqa: BLE001 - whatever dynamo, inductor or CUDA graphs refuse, in one line
                reason = f"the PPO {kind} cannot be captured ({self.capture}): {' '.join(str(error).split())[:300]}"
                self.set_capture("off")
                if self.capture_fallback is None:
                    raise CaptureError(reason) from None
                self.capture_fallback(reason + "; eager from here")
                return eager()
            self._checked.add(kind)
        for cache, before, added in zip(self._caches, saved, counts):
            cache.stats = before + added
        return result

    def set_capture(self, mode: str) -> None:
        """How the minibatch step runs from now on: ``"off"`` (eager), ``"compile"`` (``torch.compile``, one graph)
        or ``"graph"`` (compiled and replayed from a CUDA graph; CUDA only).

        :raises CaptureError: one line on why this step cannot be captured (a multi-process run, the KL early stop,
            a trunk that drew random numbers in the eager step, a module hook, graphs off CUDA).
        """
        if mode not in ("off", "compile", "graph"):
            raise ValueError(f"capture={mode!r} is not one of off, compile, graph")
        if mode != "off":
            problem = self.capture_problem(graph=mode == "graph")
            if problem is not None:
                raise CaptureError(f"the PPO step cannot be captured: {problem}")
        self.capture = mode
        self._checked = set()
        if self._step_counts is None:  # decided before the first (eager) step: applied after it
            return
        self._step.losses = compile_step(self._step.loss) if mode != "off" else self._step.loss
        self._graphed = None
        self._captured_act = compile_step(self._act_pair) if mode != "off" else None
        if mode == "graph":
            self._graphed = GraphedStep(self._step, snapshot=self._step.snapshot, key=self._capture_key)
            self._captured_act = GraphedStep(self._captured_act, key=self._capture_key)

    def _reset_graphs(self) -> None:
        """Drop the recorded CUDA graphs (the next call records again): after a load replaced tensors they read."""
        for graphed in (self._graphed, self._captured_act):
            if isinstance(graphed, GraphedStep):
                graphed.reset()

    def _preprocessors(self) -> list[torch.nn.Module]:
        """The normalisers a captured act reads (skrl's empty preprocessor is a function, no module)."""
        found = (self._observation_preprocessor, self._state_preprocessor, self._value_preprocessor)
        return [p for p in found if isinstance(p, torch.nn.Module)]

    def _capture_key(self) -> tuple | None:
        """What a CUDA graph of the step or the act fixed: the models and normalisers
        (:func:`omni_sfp.sfp.cache.capture_key`) and the addresses of the optimizer's state, which a
        ``load_state_dict`` replaces."""
        models = capture_key(*self._models, *self._preprocessors())
        if models is None:
            return None
        optimizer = tuple(
            value.data_ptr()
            for state in self.optimizer.state.values()
            for value in state.values()
            if torch.is_tensor(value)
        )
        return models[0], optimizer

    def capture_problem(self, *, graph: bool = False) -> str | None:
        """Why the step cannot be captured now, in a few words, or None."""
        if skrl_config.torch.is_distributed:
            return "a multi-process run reduces its gradients between the processes in every step"
        if self.cfg.kl_threshold:
            return "train.ppo.kl_threshold stops an epoch on a host read"
        if self.recurrent:
            return "a recurrent model's step runs eagerly (its hidden states are not captured yet)"
        if capture_key(*self._models, *self._preprocessors()) is None:
            return "a module hook is registered (a graph would not call it)"
        drew = [c.bypasses for cache, c in zip(self._caches, self._step_counts or []) if cache.cache_check != "off"]
        if any(drew):  # a keyed cache bypassed a call of the eager step: the trunk drew random numbers
            return (
                "the trunk drew random numbers in the eager step (dropout?): one captured draw would serve both roles"
            )
        if graph:
            if self.device.type != "cuda":
                return f"CUDA graphs need a CUDA device, the run is on {self.device.type}"
            if self._device_rate is None:
                return "CUDA graphs need fused Adam (train.ppo.fused_optimizer), whose learning rate is a device tensor"
        return None

    def _reduce_gradients(self) -> None:
        self.policy.reduce_parameters()
        if self.policy is not self.value:
            self.value.reduce_parameters()

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

    def _rollout_nonfinite_search(self) -> torch.Tensor | None:
        """Where the first non-finite next observation or reward is among the steps recorded since the last update
        (:func:`nonfinite_search`, on the device; None when nothing was recorded), from the memory at once: nothing
        is checked per step. A step's next observations are what the step after it acted on (the memory's next
        row); the last step's are ``_current_next_observations``. The rewards are the memory's (the time-limit
        bootstrap added)."""
        recorded = self._recorded_steps
        if not recorded:
            return None
        observations = self.memory.get_tensor_by_name("observations")
        last = self._current_next_observations.reshape(1, observations.shape[1], -1).to(observations.dtype)
        return nonfinite_search(
            observations=torch.cat([observations[1:recorded], last]),
            rewards=self.memory.get_tensor_by_name("rewards")[:recorded],
        )

    def _data_problem(self, found_index: list[float], first_step: int) -> str | None:
        """The report of :meth:`_rollout_nonfinite_search`'s values (read back), or None."""
        found = decode_nonfinite([int(v) for v in found_index], ["observations", "rewards"], self.memory.num_envs)
        return None if found is None else self._describe(first_step + found[0], *found[1:])

    def _rollout_nonfinite(self) -> tuple[int, int, str] | None:
        """``(env step, env index, quantity)`` of the first non-finite data recorded since the last update."""
        search = self._rollout_nonfinite_search()
        if search is None:
            return None
        found = decode_nonfinite(read_back(search), ["observations", "rewards"], self.memory.num_envs)
        return None if found is None else (self._first_recorded_step + found[0], *found[1:])

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
        if self._device_rate is not None:
            self._device_rate.attach()
        self._reset_graphs()
        self.scaler.load_state_dict(snapshot["scaler"])
        if self.scheduler:
            self.scheduler.load_state_dict(snapshot["scheduler"])
