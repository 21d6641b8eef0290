"""The run folder and its checkpoints: where a run writes, what a checkpoint holds, and how a run resumes.

``runs/<task>/<timestamp>_<experiment>/`` alone reproduces a run: ``config.yaml`` (the resolved config),
TensorBoard scalars, ``progress.jsonl`` (one line per iteration, then one with the final return), ``checkpoints/`` (``last.pt``, ``best.pt``,
the newest ``iter_<n>.pt``) and ``learning_curve.png``.

Resuming (``checkpoint=<file or run folder>``) restores everything the rest of the run depends on and
continues the counters: iteration, timestep (TensorBoard's step), best return. With ``resume=true`` the run
continues in the checkpoint's own run folder (``progress.jsonl`` and TensorBoard lines written after that
checkpoint are dropped, so a run killed between checkpoints has no duplicate iterations); without it, a new
run folder starts at the checkpoint's counters. Either way the rest of the run is the one an uninterrupted run
would have made (tests/test_resume.py). In a multi-process run rank 0 alone writes the run folder; the
checkpoint holds every rank's environments and RNG states. The file format (atomic writes, ``weights_only``
reads, one-line refusals) is :mod:`omni_sfp.run.checkpoint`'s.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from omni_sfp.compute import distributed
from omni_sfp.config.schema import ConfigError
from omni_sfp.config.values import max_iterations, num_envs
from omni_sfp.ppo.agent import EpisodeTracker
from omni_sfp.ppo.loop import Learner, Progress
from omni_sfp.run import checkpoint as ckpt


def make_run_dir(cfg: DictConfig, resume_from: Path | None = None, resumed_at: int | None = None) -> Path:
    """A new ``runs/<task>/<timestamp>_<experiment>`` with the resolved ``config.yaml`` (``-1``, ``-2``, ...
    when that name is taken); with ``resume=true`` the checkpoint's own run folder, which gets a
    ``config.resumed_at_<iteration>.yaml``."""
    if cfg.resume:
        run_dir = ckpt.run_folder_of(resume_from)
        if run_dir is None:
            raise ckpt.CheckpointError(
                f"checkpoint {resume_from}: resume=true continues a run folder, and this file is not in one "
                "(<run>/checkpoints/*.pt next to <run>/config.yaml); drop resume=true to start a new run folder "
                "from it"
            )
        OmegaConf.save(cfg, run_dir / f"config.resumed_at_{resumed_at}.yaml", resolve=True)
        return run_dir
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    name = f"{stamp}_{cfg.experiment}" if cfg.experiment else stamp
    run_dir = Path(cfg.runs_dir) / cfg.task.name.replace(":", "_") / name
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    for suffix in itertools.count(1):  # mkdir claims the name atomically: runs started in the same second differ
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            run_dir = run_dir.with_name(f"{name}-{suffix}")
    (run_dir / "checkpoints").mkdir()
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    return run_dir


def config_file(run_dir: Path, cfg: DictConfig, resumed_at: int | None) -> Path:
    """The config file :func:`make_run_dir` wrote for this process's run."""
    return run_dir / (f"config.resumed_at_{resumed_at}.yaml" if cfg.resume else "config.yaml")


def record_setting(path: Path, key: str, value: Any) -> None:
    """Write a setting that ``auto`` decided during the run into the run's config file (atomically), so that the
    run folder reproduces what ran."""
    saved = OmegaConf.load(path)
    OmegaConf.update(saved, key, value, merge=False)
    temporary = path.with_suffix(".yaml.tmp")
    OmegaConf.save(saved, temporary)
    os.replace(temporary, path)


def check_resumable(cfg: DictConfig, state: dict[str, Any], source: Path) -> None:
    """Refuse, before anything is built, a checkpoint this config cannot continue."""
    saved = state["config"]
    pairs = [
        ("task", saved.get("task", {}).get("name"), cfg.task.name),
        ("num_envs", saved.get("num_envs") or saved.get("task", {}).get("env", {}).get("num_envs"), num_envs(cfg)),
        ("train.ppo.rollouts", saved.get("train", {}).get("ppo", {}).get("rollouts"), cfg.train.ppo.rollouts),
    ]
    for key, then, now in pairs:
        if then != now:
            raise ckpt.CheckpointError(
                f"checkpoint {source}: saved with {key}={then}, this run has {key}={now}; pass {key}={then} to "
                "continue it"
            )
    total = max_iterations(cfg)
    if state["iteration"] >= total:
        raise ConfigError(
            f"max_iterations={total}: checkpoint {source} is already at iteration {state['iteration']}; pass a "
            "larger max_iterations to continue training it"
        )


def forget_after(run_dir: Path, iteration: int, agent, rollouts: int) -> None:
    """Resuming in the run folder: drop what the run wrote after the checkpoint it resumes from (a run killed
    between checkpoints), so progress.jsonl and TensorBoard continue without duplicates."""

    def before(line: str) -> bool:  # a line cut short by the kill is dropped too
        try:
            return json.loads(line)["iteration"] <= iteration
        except (ValueError, KeyError, TypeError):
            return False

    progress = run_dir / "progress.jsonl"
    if progress.is_file():
        kept = [line for line in progress.read_text().splitlines() if before(line)]
        tmp = progress.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, progress)
    agent.purge_tensorboard_from(iteration * rollouts + 1)


class Checkpoints:
    """A run's checkpoints: what one holds (:meth:`state_dict`), restoring one (:meth:`load_state_dict`), and
    the loop's ``checkpoint`` callback (:meth:`after_iteration`: ``best.pt``, the periodic and final files).

    :param run_dir: The run folder (rank 0), None on ranks > 0 and when playing (``test=true``).
    """

    def __init__(self, cfg: DictConfig, learner: Learner, run_dir: Path | None) -> None:
        self.cfg, self.learner, self.run_dir = cfg, learner, run_dir
        self.agent, self.env = learner.agent, learner.env
        self.rank, self.world_size = distributed.rank(), distributed.world_size()
        self.best_return = float("-inf")
        self.best_iteration: int | None = None  # the iteration best.pt holds
        self.last: Path | None = None  # the newest checkpoint written (None before the first, and on ranks > 0)
        self._best_state: dict[str, Any] | None = None  # in memory until the next checkpoint writes best.pt

    @property
    def task(self):
        """The embedded task object behind skrl's wrapper (None for other kinds)."""
        return getattr(self.env, "_env", None)

    def _local_state(self) -> dict[str, Any]:
        """What differs between the ranks of a multi-process run: environments, observations, RNG states."""
        agent, task, learner = self.agent, self.task, self.learner
        return {
            "observations": learner.observations,
            "states": learner.states,
            "task": task.state_dict() if hasattr(task, "state_dict") else None,
            "episodes": agent.episodes.state_dict() if agent.episodes else None,
            "rng": ckpt.rng_state(),
        }

    def state_dict(self) -> dict[str, Any] | None:
        """The checkpoint payload (references to live tensors: save or copy it at once). In a multi-process
        run every rank must call it (the ranks' local states are gathered); ranks > 0 get None."""
        local = distributed.gather_to_main(self._local_state())
        if local is None:
            return None
        return {
            "agent": self.agent.state_dict(),
            "timestep": self.learner.timestep,
            "iteration": self.learner.iteration,
            "best_return": self.best_return,
            "best_iteration": self.best_iteration,
            "local": local,  # one entry per rank
            "config": OmegaConf.to_container(self.cfg, resolve=True),
        }

    def load_state_dict(self, state: dict[str, Any], *, source: Path, models_only: bool = False) -> None:
        """Restore a checkpoint: the models alone (``models_only``, for playing) or everything."""
        try:
            self.agent.load_state_dict(state["agent"], models_only=models_only)
        except (KeyError, RuntimeError, ValueError, AttributeError) as error:
            raise ckpt.CheckpointError(
                f"checkpoint {source}: does not fit this model/task ({' '.join(str(error).split())[:200]})"
            ) from None
        if models_only:
            return
        self.learner.iteration = state["iteration"]
        self.best_return = state["best_return"]
        self.best_iteration = state.get("best_iteration")  # absent from checkpoints written before it was kept
        local = state["local"]
        if len(local) != self.world_size:
            # another number of processes: models, optimizer and counters continue; environments start afresh
            print(
                f"[omni_sfp] checkpoint {source} was written by {len(local)} process(es), this run has "
                f"{self.world_size}: the environments and RNG states start afresh",
                file=sys.stderr,
                flush=True,
            )
            return
        mine = local[self.rank]
        if mine["observations"].shape[0] != self.env.num_envs:
            raise ckpt.CheckpointError(
                f"checkpoint {source}: saved with {mine['observations'].shape[0]} envs per "
                f"process, this run has {self.env.num_envs}"
            )
        if mine["task"] is not None and hasattr(self.task, "load_state_dict"):
            self.task.load_state_dict(mine["task"])
            self.learner.observations, self.learner.states = mine["observations"], mine["states"]
            if mine["episodes"] is not None:  # the running returns of the episodes in progress
                self.agent.episodes = EpisodeTracker(self.env.num_envs, self.agent.device)
                self.agent.episodes.load_state_dict(mine["episodes"])
        # else (simulator and Gymnasium tasks keep their state outside): the environments start afresh with a
        # reset; the saved observations and running returns belong to the old environment state
        ckpt.set_rng_state(mine["rng"])

    def save(self) -> Path | None:
        """Write ``iter_<n>.pt``, ``last.pt`` and a pending ``best.pt`` (rank 0; every rank must call it)."""
        state = self.state_dict()
        if state is None:
            return None
        folder = self.run_dir / "checkpoints"
        path = ckpt.save_atomic(state, folder / f"iter_{self.learner.iteration}.pt")
        ckpt.save_atomic(state, folder / "last.pt")
        if self._best_state is not None:
            ckpt.save_atomic(self._best_state, folder / "best.pt")
            self._best_state = None
        ckpt.rotate(folder, self.cfg.train.keep_checkpoints)
        writer = getattr(self.agent, "writer", None)
        if writer is not None:
            writer.flush()  # TensorBoard on disk up to this checkpoint
        self.last = path
        return path

    def after_iteration(self, progress: Progress, final: bool) -> None:
        """The loop's ``checkpoint`` callback: remember a new best state; write every ``checkpoint_interval``
        iterations and when the loop is about to stop."""
        if progress.mean_return is not None and progress.mean_return > self.best_return:
            self.best_return, self.best_iteration = progress.mean_return, progress.iteration
            best = self.state_dict()  # collective in a multi-process run: every rank improves together
            self._best_state = copy.deepcopy(best) if best is not None else None
        interval = self.cfg.train.checkpoint_interval
        if final or (interval and not progress.iteration % interval):
            self.save()
