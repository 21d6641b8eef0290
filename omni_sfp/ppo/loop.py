"""The iteration loop: rollout, update, log, checkpoint, stop check, in that order, in one function.

:meth:`Learner.learn` is where training happens; everything else plugs into it. The Runner passes a
``log`` callback (progress.jsonl, TensorBoard, the console), a ``checkpoint`` callback (best.pt, the
periodic and final checkpoints) and a ``tune`` hook (``train.models.compile=auto`` compiles there); the
benchmark and the tests pass their own or none. The agent owns the PPO arithmetic (``SFPPPO.update`` returns
its losses); the loop owns where the run is: the observations the next step acts on and the iteration
counter, which a checkpoint saves and a resume restores.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from typing_extensions import Self

from omni_sfp.compute import distributed


@dataclass
class Progress:
    """One iteration (rollout + update) as it goes to TensorBoard, progress.jsonl and the panel."""

    iteration: int
    timestep: int  # env steps per env so far
    sps: float  # env steps (all envs, all processes) per second over the last iteration
    mean_return: float | None  # mean return of the episodes that finished in this iteration
    mean_length: float | None
    sfp_hit_rate: float  # cache hits per shareable trunk call so far
    rollout_s: float
    update_s: float
    skipped_updates: int = 0  # updates dropped so far because of non-finite data (train.check_finite=skip)


class StopRequested:
    """SIGINT/SIGTERM handler: the first signal stops at the next iteration boundary (a checkpoint is
    written there), a second one interrupts at once (``KeyboardInterrupt``, no checkpoint)."""

    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None  # the first signal received
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.signal).name if self.signal is not None else None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signal = signum
        print(
            f"\n[omni_sfp] {signal.Signals(signum).name}: stopping after this iteration and saving a checkpoint "
            "(send it again to stop at once, without a checkpoint)",
            file=sys.stderr,
            flush=True,
        )


class Learner:
    """An initialised agent (``agent.init()`` done) on a skrl-wrapped env, for ``iterations`` iterations.

    :param log: called after every update with the iteration's :class:`Progress` and the update's losses.
    :param checkpoint: called after ``log`` with the progress and whether the loop is about to stop.
    :param tune: called last, unless a stop was requested, with the progress: where the runner changes how the
        next iterations run (``omni_sfp.compute.compile_policy.AutoCompile`` compiles the trunk there).
    """

    def __init__(
        self,
        env,
        agent,
        *,
        iterations: int,
        stop: StopRequested | None = None,
        log: Callable[[Progress, dict[str, float]], None] | None = None,
        checkpoint: Callable[[Progress, bool], None] | None = None,
        tune: Callable[[Progress], None] | None = None,
    ) -> None:
        self.env, self.agent, self.iterations = env, agent, iterations
        self.stop = stop if stop is not None else StopRequested()
        self.log, self.checkpoint, self.tune = log, checkpoint, tune
        self.iteration = 0  # iterations done; a resume sets it with the observations below
        self.start_iteration = 0
        self.observations: torch.Tensor | None = None
        self.states: torch.Tensor | None = None

    @property
    def timestep(self) -> int:
        """Env steps per env so far (skrl's ``timestep``; TensorBoard's step)."""
        return self.iteration * self.agent.cfg.rollouts

    def learn(self) -> None:
        """Rollout, update, log, checkpoint, stop check; until ``iterations`` or a stop request."""
        agent, env = self.agent, self.env
        sync = torch.cuda.synchronize if agent.device.type == "cuda" else (lambda: None)
        agent.enable_training_mode(True)
        if self.observations is None:
            self.observations, _ = env.reset()
            self.states = env.state()
        self.start_iteration = self.iteration
        total = self.iterations * agent.cfg.rollouts
        while self.iteration < self.iterations:
            start = time.perf_counter()
            self.rollout(total)
            sync()
            rollout_end = time.perf_counter()

            losses = agent.update(timestep=self.timestep + agent.cfg.rollouts - 1, timesteps=total)
            sync()
            end = time.perf_counter()
            self.iteration += 1
            mean_return, mean_length, _ = agent.last_episodes  # read with the update's losses

            progress = Progress(
                iteration=self.iteration,
                timestep=self.timestep,
                sps=agent.cfg.rollouts * env.num_envs * distributed.world_size() / (end - start),  # all processes
                mean_return=mean_return,
                mean_length=mean_length,
                sfp_hit_rate=agent.sfp_share_rate,
                rollout_s=rollout_end - start,
                update_s=end - rollout_end,
                skipped_updates=agent.skipped_updates,
            )
            stopping = distributed.any_rank(self.stop.requested, agent.device)  # every rank stops together
            if self.log is not None:
                self.log(progress, losses)
            if self.checkpoint is not None:
                self.checkpoint(progress, stopping or self.iteration >= self.iterations)
            if stopping:
                break
            if self.tune is not None:
                self.tune(progress)

    def rollout(self, timesteps: int) -> None:
        """``cfg.rollouts`` env steps into the agent's memory (no autograd; the agent syncs nothing)."""
        agent, env = self.agent, self.env
        with torch.no_grad():
            for timestep in range(self.timestep, self.timestep + agent.cfg.rollouts):
                actions, _ = agent.act(self.observations, self.states, timestep=timestep, timesteps=timesteps)
                try:
                    next_observations, rewards, terminated, truncated, infos = env.step(actions)
                except ValueError as error:  # e.g. the task refuses the NaN actions that a NaN observation made:
                    agent.raise_pending_nonfinite(cause=error)  # report the observation, where it started
                    raise
                next_states = env.state()
                agent.record_transition(
                    observations=self.observations,
                    states=self.states,
                    actions=actions,
                    rewards=rewards,
                    next_observations=next_observations,
                    next_states=next_states,
                    terminated=terminated,
                    truncated=truncated,
                    infos=infos,
                    timestep=timestep,
                    timesteps=timesteps,
                )
                self.observations, self.states = next_observations, next_states
