"""Where a run's progress goes: each iteration to progress.jsonl, TensorBoard and the console
(:class:`ProgressOutput`, the loop's ``log`` callback on rank 0), and the run's end in one :class:`Summary`
with its greppable ``Training time: ... | SPS: ... | SFP cache hits: ...`` line."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from omni_sfp.compute import distributed
from omni_sfp.ppo.agent import SFPPPO
from omni_sfp.ppo.loop import Progress

# A run kept what it learned when its final deterministic return is at least KEPT_FRACTION of its best training
# mean over WINDOW iterations (issue 38: a run reached 49 of 50, ended at 27.9, and said nothing), or, where it is
# not, of best.pt's deterministic return: the best of hundreds of windows of a noisy return (LunarLander's) sits
# above the level the policy holds, and a sure policy's mean actions can play below its samples
KEPT_FRACTION = 0.9
WINDOW = 10
# the base's KL-adaptive bound (cfg/train/PPO.yaml, annealed): a run that lost what it learned with a higher one that
# is not annealed (Isaac Lab's skrl configs: KLAdaptiveLR's default 1e-2) is told how to hold the rate
HELD_RATE_BOUND = 1e-3


def best_training_mean(history: list[Progress], window: int = WINDOW) -> tuple[float, int, int] | None:
    """The best mean training return over ``window`` consecutive iterations (the mean of the iterations among them
    that finished episodes: a 200-step episode ends every 12 iterations of 16 steps), with the first and last of
    those iterations; None for a run shorter than ``window`` iterations or one that finished no episode."""
    return best_window_mean([(p.iteration, p.mean_return) for p in history], window)


def best_window_mean(points: list[tuple[int, float | None]], window: int = WINDOW) -> tuple[float, int, int] | None:
    """:func:`best_training_mean` of a learning curve's ``(position, mean return or None)`` points, one per
    iteration."""
    if len(points) < window:
        return None
    means = []
    for start in range(len(points) - window + 1):
        returns = [r for _, r in points[start : start + window] if r is not None]
        if returns:
            means.append((sum(returns) / len(returns), points[start][0], points[start + window - 1][0]))
    return max(means, key=lambda m: m[0]) if means else None


def lost(final_return: float, best_mean: float, kept_fraction: float = KEPT_FRACTION) -> bool:
    """Whether ``final_return`` fell below ``kept_fraction`` of ``best_mean`` (measured by its size: -200 is below
    90% of a best of -150)."""
    return final_return < best_mean - (1.0 - kept_fraction) * abs(best_mean)


@dataclass
class Summary:
    training_time_s: float
    sps: float
    sfp_hit_rate: float | None  # None: no cache in use
    final_return: float | None  # deterministic evaluation after training
    optimal_return: float | None
    iterations: int
    run_dir: Path | None  # None on ranks > 0 of a multi-process run
    history: list[Progress] = field(default_factory=list)
    interrupted: str | None = None  # "SIGINT" or "SIGTERM" when a signal stopped the run early
    checkpoint: Path | None = None  # the last checkpoint written
    best_iteration: int | None = None  # the iteration best.pt holds (the best single training iteration's return)
    rate_bound: float | None = None  # a KL-adaptive rate's bound when it is not annealed (None: annealed, or fixed)
    best_checkpoint_return: float | None = None  # best.pt's deterministic return, played where the final fell short

    @property
    def best_mean(self) -> tuple[float, int, int] | None:
        """:func:`best_training_mean` of this run's history."""
        return best_training_mean(self.history)

    @property
    def below_training(self) -> bool | None:
        """Whether the final deterministic return is below :data:`KEPT_FRACTION` of the best training mean; None
        when there is no final return or too short a history to tell. A resumed run judges from the iterations it
        ran."""
        best = self.best_mean
        if self.final_return is None or best is None:
            return None
        return lost(self.final_return, best[0])

    @property
    def kept(self) -> bool | None:
        """Whether the run kept what it learned: its final return is not below the training's best
        (:attr:`below_training`), or best.pt, played the same way, does no better (:func:`lost`)."""
        below = self.below_training
        if below is None:
            return None
        if below and self.best_checkpoint_return is not None:
            return not lost(self.final_return, self.best_checkpoint_return)
        return not below

    def best_checkpoint(self) -> Path | None:
        """``best.pt`` of the run folder, where it was written."""
        path = self.run_dir / "checkpoints" / "best.pt" if self.run_dir is not None else None
        return path if path is not None and path.is_file() else None

    def final_record(self) -> dict:
        """The run's last progress.jsonl line: the final return against the best training mean, and best.pt."""
        best = self.best_mean
        record = {"final_return": self.final_return, "kept_what_it_learned": self.kept}
        if best is not None:
            record.update(best_training_mean=best[0], best_training_iterations=[best[1], best[2]])
        if self.best_checkpoint_return is not None:
            record.update(best_checkpoint_return=self.best_checkpoint_return)
        if self.kept is False:
            record.update(best_checkpoint=str(self.best_checkpoint()), best_checkpoint_iteration=self.best_iteration)
        return record

    def line(self) -> str:
        hits = "off" if self.sfp_hit_rate is None else f"{100 * self.sfp_hit_rate:.1f}%"
        line = f"Training time: {self.training_time_s:.1f} s | SPS: {self.sps:.0f} | SFP cache hits: {hits}"
        if self.kept is False:
            mean, first, last = self.best_mean
            best = self.best_checkpoint()
            plays = "" if self.best_checkpoint_return is None else f" and plays {self.best_checkpoint_return:.2f}"
            where = (
                f"; best.pt holds iteration {self.best_iteration}{plays}: test=true checkpoint={self.run_dir} "
                "test_checkpoint=best plays it"
                if best is not None
                else ""
            )
            line += (
                f" | LOST WHAT IT LEARNED: final return {self.final_return:.2f}, below {KEPT_FRACTION:.0%} of the "
                f"best training mean {mean:.2f} (iterations {first}-{last}){where}"
            )
            if self.rate_bound is not None and self.rate_bound > HELD_RATE_BOUND:
                line += (
                    f"; the KL-adaptive rate climbs to its bound {self.rate_bound:g} once the policy is sure of "
                    f"itself (docs/generic-defaults.md): train.ppo.max_learning_rate={HELD_RATE_BOUND:g} "
                    "train.ppo.learning_rate_anneal=true hold it"
                )
        return line


class ProgressOutput:
    """Where each iteration's progress goes on rank 0: ``progress.jsonl`` (and ``progress_file``),
    TensorBoard, and the console: a tqdm bar with ETA on a terminal, else (a log file, CI) one compact line
    every ``every`` iterations and at the last one."""

    def __init__(
        self,
        paths: list[Path],
        agent: SFPPPO,
        *,
        iterations: int,
        start_iteration: int,
        console: str,
        cache_in_use: bool,
        every: int | None = None,
    ) -> None:
        self.files = []
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.files.append(open(path, "a"))  # noqa: SIM115 (open for the whole run; close() closes it)
        self.agent, self.cache_in_use = agent, cache_in_use
        self.iterations, self.start_iteration = iterations, start_iteration
        self.every = every or max(1, iterations // 10)
        self.skipped = agent.skipped_updates
        self.start = time.perf_counter()
        self.bar = None
        if console == "bar":
            import tqdm

            self.bar = tqdm.tqdm(
                total=iterations,
                initial=start_iteration,
                unit="it",
                file=sys.stdout,
                mininterval=1.0,
                dynamic_ncols=True,
            )

    def write(self, progress: Progress, losses: dict[str, float]) -> None:
        agent = self.agent
        if progress.skipped_updates > self.skipped:
            print(
                f"[omni_sfp] iteration {progress.iteration}: update skipped ({progress.skipped_updates} so far): "
                f"{agent.last_skip_reason}",
                file=sys.stderr,
                flush=True,
            )
        self.skipped = progress.skipped_updates
        line = json.dumps(progress.__dict__)
        for file in self.files:
            file.write(line + "\n")
            file.flush()

        if progress.mean_return is not None:  # the update's losses are tracked already, under skrl's tags
            agent.track_data("Reward / Episode return (mean)", progress.mean_return)
            agent.track_data("Episode / Length (mean)", progress.mean_length)
        agent.track_data("SFP / Cache hit rate (shareable calls)", progress.sfp_hit_rate)
        agent.track_data("Stats / SPS", progress.sps)
        agent.track_data("Stats / Rollout time (s)", progress.rollout_s)
        agent.track_data("Stats / Update time (s)", progress.update_s)
        if getattr(agent, "writer", None) is not None:
            agent.write_tracking_data(timestep=progress.timestep, timesteps=self.iterations * agent.cfg.rollouts)
        agent.tracking_data.clear()

        shown = "-" if progress.mean_return is None else f"{progress.mean_return:.1f}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"return {shown} | SPS {progress.sps:.0f}", refresh=False)
            self.bar.update(1)
        elif not progress.iteration % self.every or progress.iteration == self.iterations:
            done = progress.iteration - self.start_iteration
            eta = (time.perf_counter() - self.start) / done * (self.iterations - progress.iteration)
            hits = f"{100 * progress.sfp_hit_rate:.1f}%" if self.cache_in_use else "off"
            print(
                f"[omni_sfp] iteration {progress.iteration}/{self.iterations} | env steps "
                f"{progress.timestep * agent.memory.num_envs * distributed.world_size()} | SPS {progress.sps:.0f} | return {shown} | "
                f"cache hits {hits} | ETA {eta:.0f} s",
                flush=True,
            )

    def note(self, line: str) -> None:
        """A line on the console between the iterations' output (above the bar on a terminal)."""
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def close(self) -> None:
        for file in self.files:
            file.close()
        if self.bar is not None:
            self.bar.close()
        writer = getattr(self.agent, "writer", None)
        if writer is not None:
            writer.flush()
