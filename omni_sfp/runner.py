"""From a validated config to a finished run: task -> env -> model (cache) -> SFPPPO -> loop.Learner -> run folder.

The run folder ``runs/<task>/<timestamp>_<experiment>/`` alone reproduces a run: ``config.yaml`` (the
resolved config), TensorBoard scalars, ``progress.jsonl`` (one line per iteration), ``checkpoints/``
(``last.pt``, ``best.pt``, the newest ``iter_<n>.pt``) and ``learning_curve.png``.

Resuming (``checkpoint=<file or run folder>``) restores everything the rest of the run depends on and
continues the counters: iteration, timestep (TensorBoard's step), best return. With ``resume=true`` the run
continues in the checkpoint's own run folder (``progress.jsonl`` and TensorBoard lines written after that
checkpoint are dropped, so a run killed between checkpoints has no duplicate iterations); without it, a
new run folder starts at the checkpoint's counters. Either way the rest of the run is the one an
uninterrupted run would have made (tests/test_resume.py). In a multi-process run rank 0 alone writes the
run folder; the checkpoint holds every rank's environments and RNG states.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from skrl.resources.schedulers.torch import KLAdaptiveLR

from omni_sfp import checkpoint as ckpt
from omni_sfp import distributed, video
from omni_sfp.agent import SFPPPO, EpisodeTracker
from omni_sfp.config import ConfigError, max_iterations, num_envs
from omni_sfp.export import ExportedPolicy
from omni_sfp.loop import Learner, Progress, SFPTrainer, StopRequested  # noqa: F401 (SFPTrainer: the bench's name)
from omni_sfp.models import GaussianActor, SharedActorCritic, ValueCritic
from omni_sfp.registry import make_env


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when present, else CPU. Asking for CUDA without one is an error, not a fallback.

    In a multi-process run ``auto`` and ``cuda`` mean this process's GPU, ``cuda:LOCAL_RANK``.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={name!r}: CUDA is not available on this machine (use device=cpu or auto)")
    if name == "cuda" and distributed.world_size() > 1:
        local_rank = distributed.local_rank()
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"device=cuda: this is process LOCAL_RANK={local_rank} and the machine has "
                               f"{torch.cuda.device_count()} GPU(s); start at most that many processes per node "
                               "(torchrun --nproc_per_node) or pass device=cpu")
        name = f"cuda:{local_rank}"
    return torch.device(name)


def precision_note(device: torch.device, mixed_precision: bool) -> str:
    """What ``train.mixed_precision`` really does on this device, said plainly."""
    if not mixed_precision:
        return "fp32"
    if device.type == "cuda":
        return "mixed: fp16 autocast + GradScaler (CUDA)"
    return "mixed: bf16 autocast on CPU (GradScaler inactive for bf16; fast only on CPUs with bf16 instructions)"


def rewards_scaler(scale: float) -> Callable:
    def shape(rewards: torch.Tensor, timestep: int, timesteps: int) -> torch.Tensor:
        return rewards * scale

    return shape


def build_models(cfg: DictConfig, env, device: torch.device) -> dict[str, Any]:
    m = cfg.train.models
    units = list(m.units)
    if m.separate:
        kwargs = {"units": units, "activation": m.activation, "init": m.init}
        policy = GaussianActor(env.observation_space, env.action_space, device, initial_log_std=m.initial_log_std, **kwargs)
        value = ValueCritic(env.observation_space, env.action_space, device, **kwargs)
        if m.compile:
            policy.net, value.net = torch.compile(policy.net), torch.compile(value.net)
        return {"policy": policy, "value": value}
    model = SharedActorCritic(
        env.observation_space,
        env.action_space,
        device,
        units=units,
        activation=m.activation,
        init=m.init,
        single_forward_pass=cfg.train.sfp.enabled,
        cache_check=cfg.train.sfp.cache_check,
        initial_log_std=m.initial_log_std,
    )
    if m.compile:  # compile the MLP inside the cache: the cache's keys stay in Python, the math gets fused
        model.trunk.trunk = torch.compile(model.trunk.trunk)
    return {"policy": model, "value": model}


def ppo_cfg(cfg: DictConfig, env, device: torch.device, run_dir: Path | None):
    """skrl's ``PPO_CFG`` for a validated config (also used by the benchmark's plain-skrl rows)."""
    from skrl.agents.torch.ppo import PPO_CFG

    p = cfg.train.ppo
    scaler = distributed.scaler_class()  # skrl's RunningStandardScaler; pooled over the ranks when distributed
    agent_cfg = PPO_CFG(
        rollouts=p.rollouts,
        learning_epochs=p.learning_epochs,
        mini_batches=p.mini_batches,
        discount_factor=p.discount_factor,
        gae_lambda=p.gae_lambda,
        learning_rate=p.learning_rate,
        learning_rate_scheduler=KLAdaptiveLR if p.learning_rate_schedule == "kl_adaptive" else None,
        learning_rate_scheduler_kwargs={"kl_threshold": p.desired_kl} if p.learning_rate_schedule == "kl_adaptive" else {},
        observation_preprocessor=scaler if p.observation_normalization else None,
        observation_preprocessor_kwargs={"size": env.observation_space, "device": device},
        value_preprocessor=scaler if p.value_normalization else None,
        value_preprocessor_kwargs={"size": 1, "device": device},
        grad_norm_clip=p.grad_norm_clip,
        ratio_clip=p.ratio_clip,
        value_clip=p.value_clip,
        entropy_loss_scale=p.entropy_loss_scale,
        value_loss_scale=p.value_loss_scale,
        kl_threshold=p.kl_threshold,
        time_limit_bootstrap=p.time_limit_bootstrap,
        rewards_shaper=rewards_scaler(p.rewards_scale) if p.rewards_scale != 1 else None,
        mixed_precision=cfg.train.mixed_precision,
    )
    agent_cfg.experiment.write_interval = p.rollouts if run_dir is not None else 0  # TensorBoard, once an iteration
    agent_cfg.experiment.checkpoint_interval = 0  # checkpoints are ours: atomic, resumable
    if run_dir is not None:
        agent_cfg.experiment.directory = str(run_dir.parent)
        agent_cfg.experiment.experiment_name = run_dir.name
    return agent_cfg


def build_agent(cfg: DictConfig, env, models: dict, device: torch.device, run_dir: Path | None) -> SFPPPO:
    from skrl.memories.torch import RandomMemory

    p = cfg.train.ppo
    memory = RandomMemory(memory_size=p.rollouts, num_envs=env.num_envs, device=device)
    agent = SFPPPO(
        models=models,
        memory=memory,
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=device,
        cfg=ppo_cfg(cfg, env, device, run_dir),
        check_finite=cfg.train.check_finite,
        fused_optimizer=p.fused_optimizer,
    )
    agent.init()  # memory tensors; the TensorBoard writer when there is a run folder
    return agent


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

    def line(self) -> str:
        hits = "off" if self.sfp_hit_rate is None else f"{100 * self.sfp_hit_rate:.1f}%"
        return f"Training time: {self.training_time_s:.1f} s | SPS: {self.sps:.0f} | SFP cache hits: {hits}"


class ProgressOutput:
    """Where each iteration's progress goes on rank 0: ``progress.jsonl`` (and ``progress_file``),
    TensorBoard, and the console: a tqdm bar with ETA on a terminal, else (a log file, CI) one compact line
    every ``every`` iterations and at the last one."""

    def __init__(self, paths: list[Path], agent: SFPPPO, *, iterations: int, start_iteration: int, console: str,
                 cache_in_use: bool, every: int | None = None) -> None:
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

            self.bar = tqdm.tqdm(total=iterations, initial=start_iteration, unit="it", file=sys.stdout,
                                 mininterval=1.0, dynamic_ncols=True)

    def write(self, progress: Progress, losses: dict[str, float]) -> None:
        agent = self.agent
        if progress.skipped_updates > self.skipped:
            print(f"[omni_sfp] iteration {progress.iteration}: update skipped ({progress.skipped_updates} so far): "
                  f"{agent.last_skip_reason}", file=sys.stderr, flush=True)
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
            print(f"[omni_sfp] iteration {progress.iteration}/{self.iterations} | env steps "
                  f"{progress.timestep * agent.memory.num_envs * distributed.world_size()} | SPS {progress.sps:.0f} | return {shown} | "
                  f"cache hits {hits} | ETA {eta:.0f} s", flush=True)

    def close(self) -> None:
        for file in self.files:
            file.close()
        if self.bar is not None:
            self.bar.close()
        writer = getattr(self.agent, "writer", None)
        if writer is not None:
            writer.flush()

class Runner:
    """Builds everything from a validated config; ``train()`` and ``test()`` run it.

    A checkpoint to resume from (``checkpoint=``) is read and checked against the config before any
    environment is built, so a wrong file costs no simulation start-up.
    """

    def __init__(self, cfg: DictConfig, *, disable_progressbar: bool | None = None) -> None:
        from skrl.utils import set_seed

        self.cfg = cfg
        self.rank, self.world_size = distributed.rank(), distributed.world_size()
        self.device = resolve_device(cfg.device)
        self.resume_from: Path | None = ckpt.resolve(cfg.checkpoint) if cfg.checkpoint else None
        self._resume_state: dict[str, Any] | None = None
        if self.resume_from is not None:
            self._resume_state = ckpt.load(self.resume_from, self.device)
            if not cfg.test:
                self._check_resumable(self._resume_state)
        set_seed(cfg.seed, deterministic=cfg.torch_deterministic)  # skrl adds the rank when distributed
        self.run_dir = None if cfg.test or self.rank != 0 else self._make_run_dir()
        task_cfg = {k: v for k, v in OmegaConf.to_container(cfg.task.env, resolve=True).items() if k != "num_envs"}
        if cfg.video:
            task_cfg.update(video.render_options(cfg.task.name))
        self.env = make_env(cfg.task.name, num_envs=num_envs(cfg), device=self.device, seed=cfg.seed + self.rank,
                            headless=cfg.headless, task_cfg=task_cfg)
        self.outputs_dir = self._outputs_dir()  # videos/ and exported/ (None on ranks > 0)
        if cfg.video and self.outputs_dir is not None:  # test=true: one clip from the start of the evaluation
            self.env = video.RecordingEnv(self.env, self.outputs_dir / "videos" / ("play" if cfg.test else "train"),
                                          video_length=cfg.video_length,
                                          video_interval=None if cfg.test else cfg.video_interval)
        self.videos: list[Path] = []
        self.exported: ExportedPolicy | None = None
        self.models = build_models(cfg, self.env, self.device)
        self.agent = build_agent(cfg, self.env, self.models, self.device, self.run_dir)
        self.learner = Learner(self.env, self.agent, iterations=max_iterations(cfg), log=self._log,
                               checkpoint=self._checkpoint)
        self.disable_progressbar = disable_progressbar
        self.history: list[Progress] = []
        self.best_return = float("-inf")
        self._output: ProgressOutput | None = None
        self._best_state: dict[str, Any] | None = None  # in memory until the next checkpoint writes best.pt
        self._last_checkpoint: Path | None = None

    # -- run folder -----------------------------------------------------------------------------------------
    def _outputs_dir(self) -> Path | None:
        """Where videos and the exported policy go: the run folder, or with test=true the checkpoint's run folder
        (Isaac Lab's play.py writes there too), else the checkpoint's own folder."""
        if self.run_dir is not None or self.rank != 0:
            return self.run_dir
        return ckpt.run_folder_of(self.resume_from) or self.resume_from.parent

    def _finish_outputs(self) -> None:
        """The clip the run ended in, and ``export=true``'s ``exported/policy.pt`` and ``policy.onnx``."""
        if isinstance(self.env, video.RecordingEnv):
            self.env.flush()
            self.videos = list(self.env.written)
        if self.cfg.export and self.outputs_dir is not None:
            from omni_sfp.export import export_policy

            self.agent.enable_models_training_mode(False)
            self.exported = export_policy(self.agent.policy, self.agent.checkpoint_modules.get("observation_preprocessor"),
                                          self.env.action_space, self.outputs_dir / "exported")

    def _start_wandb(self):
        """``wandb_activate=true``: a W&B run in the run folder with the config, mirroring TensorBoard."""
        from omni_sfp import wandb_logging

        settings = wandb_logging.WandbSettings.from_config(self.cfg)
        if not settings.activate:
            return None
        run = wandb_logging.start_run(settings, OmegaConf.to_container(self.cfg, resolve=True), self.run_dir)
        wandb_logging.mirror(self.agent, run)
        return run

    def _make_run_dir(self) -> Path:
        if self.cfg.resume:
            run_dir = ckpt.run_folder_of(self.resume_from)
            if run_dir is None:
                raise ckpt.CheckpointError(
                    f"checkpoint {self.resume_from}: resume=true continues a run folder, and this file is not in "
                    "one (<run>/checkpoints/*.pt next to <run>/config.yaml); drop resume=true to start a new run "
                    "folder from it"
                )
            resumed_at = self._resume_state["iteration"]
            OmegaConf.save(self.cfg, run_dir / f"config.resumed_at_{resumed_at}.yaml", resolve=True)
            return run_dir
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        name = f"{stamp}_{self.cfg.experiment}" if self.cfg.experiment else stamp
        run_dir = Path(self.cfg.runs_dir) / self.cfg.task.name.replace(":", "_") / name
        suffix = 1
        while run_dir.exists():
            run_dir = run_dir.with_name(f"{name}-{suffix}")
            suffix += 1
        (run_dir / "checkpoints").mkdir(parents=True)
        OmegaConf.save(self.cfg, run_dir / "config.yaml", resolve=True)
        return run_dir

    # -- checkpoints ------------------------------------------------------------------------------------------
    @property
    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint this run wrote (None before the first, and on ranks > 0)."""
        return self._last_checkpoint

    @property
    def task(self):
        """The embedded task object behind skrl's wrapper (None for other kinds)."""
        return getattr(self.env, "_env", None)

    def _check_resumable(self, state: dict[str, Any]) -> None:
        """Refuse, before anything is built, a checkpoint this config cannot continue."""
        source, saved, cfg = self.resume_from, state["config"], self.cfg
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
        local = state["local"]
        if len(local) != self.world_size:
            # another number of processes: models, optimizer and counters continue; environments start afresh
            print(f"[omni_sfp] checkpoint {source} was written by {len(local)} process(es), this run has "
                  f"{self.world_size}: the environments and RNG states start afresh", file=sys.stderr, flush=True)
            return
        mine = local[self.rank]
        if mine["observations"].shape[0] != self.env.num_envs:
            raise ckpt.CheckpointError(f"checkpoint {source}: saved with {mine['observations'].shape[0]} envs per "
                                       f"process, this run has {self.env.num_envs}")
        if mine["task"] is not None and hasattr(self.task, "load_state_dict"):
            self.task.load_state_dict(mine["task"])
            self.learner.observations, self.learner.states = mine["observations"], mine["states"]
            if mine["episodes"] is not None:  # the running returns of the episodes in progress
                self.agent.episodes = EpisodeTracker(self.env.num_envs, self.device)
                self.agent.episodes.load_state_dict(mine["episodes"])
        # else (simulator and Gymnasium tasks keep their state outside): the environments start afresh with a
        # reset; the saved observations and running returns belong to the old environment state
        ckpt.set_rng_state(mine["rng"])

    def _save(self) -> Path | None:
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
        self._last_checkpoint = path
        return path

    # -- the loop's two callbacks: log, checkpoint ------------------------------------------------------------
    def _log(self, progress: Progress, losses: dict[str, float]) -> None:
        self.history.append(progress)
        if self._output is not None:
            self._output.write(progress, losses)
        else:
            self.agent.tracking_data.clear()  # nobody writes it out: do not let it grow for the whole run

    def _checkpoint(self, progress: Progress, final: bool) -> None:
        if progress.mean_return is not None and progress.mean_return > self.best_return:
            self.best_return = progress.mean_return
            best = self.state_dict()  # collective in a multi-process run: every rank improves together
            self._best_state = copy.deepcopy(best) if best is not None else None
        interval = self.cfg.train.checkpoint_interval
        if final or (interval and not progress.iteration % interval):
            self._save()

    # -- train / test -------------------------------------------------------------------------------------------
    @property
    def iteration(self) -> int:
        return self.learner.iteration

    def train(self) -> Summary:
        cfg = self.cfg
        main = self.run_dir is not None
        with StopRequested() as stop:
            self.learner.stop = stop
            if self._resume_state is not None:
                self.load_state_dict(self._resume_state, source=self.resume_from)
                self._resume_state = None
                if main and cfg.resume:
                    self._forget_after(self.learner.iteration)
                if isinstance(self.env, video.RecordingEnv):  # clips keep their place: step-<n> counts the whole run
                    self.env.step_count = self.learner.iteration * cfg.train.ppo.rollouts
            if main:
                self._output = ProgressOutput(
                    [self.run_dir / "progress.jsonl", *([Path(cfg.progress_file)] if cfg.progress_file else [])],
                    self.agent, iterations=self.learner.iterations, start_iteration=self.learner.iteration,
                    console="bar" if sys.stdout.isatty() and not self.disable_progressbar else "lines",
                    cache_in_use=self._cache_in_use,
                )
            wandb_run = self._start_wandb() if main else None
            start = time.perf_counter()
            try:
                self.learner.learn()
            finally:
                if self._output is not None:
                    self._output.close()
                if wandb_run is not None:
                    wandb_run.finish()
            elapsed = time.perf_counter() - start
        learner = self.learner
        steps_done = (learner.iteration - learner.start_iteration) * cfg.train.ppo.rollouts * self.env.num_envs
        steps_done *= self.world_size
        interrupted = stop.signal_name
        # an interrupted run skips the evaluation episodes: whoever sent the signal wants the process gone
        final_return = self.evaluate(episodes=1) if main and interrupted is None else None
        task = self.task
        summary = Summary(
            training_time_s=elapsed,
            sps=steps_done / elapsed if elapsed > 0 else 0.0,
            sfp_hit_rate=self.agent.sfp_share_rate if self._cache_in_use else None,
            final_return=final_return,
            optimal_return=task.optimal_return() if hasattr(task, "optimal_return") else None,
            iterations=learner.iteration,
            run_dir=self.run_dir,
            history=self.history,
            interrupted=interrupted,
            checkpoint=self._last_checkpoint,
        )
        if main:
            self._plot(summary)
            self._finish_outputs()
        return summary

    def _forget_after(self, iteration: int) -> None:
        """Resuming in the run folder: drop what the run wrote after the checkpoint it resumes from (a run
        killed between checkpoints), so progress.jsonl and TensorBoard continue without duplicates."""
        def before(line: str) -> bool:  # a line cut short by the kill is dropped too
            try:
                return json.loads(line)["iteration"] <= iteration
            except (ValueError, KeyError, TypeError):
                return False

        progress = self.run_dir / "progress.jsonl"
        if progress.is_file():
            kept = [line for line in progress.read_text().splitlines() if before(line)]
            tmp = progress.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, progress)
        self.agent.purge_tensorboard_from(iteration * self.cfg.train.ppo.rollouts + 1)

    @property
    def _cache_in_use(self) -> bool:
        return not self.cfg.train.models.separate and self.cfg.train.sfp.enabled and self.cfg.train.sfp.cache_check != "off"

    def evaluate(self, episodes: int) -> float | None:
        """Mean return of the first ``episodes`` episodes of every env, with deterministic (mean) actions."""
        from omni_sfp.evaluation import evaluate

        max_length = getattr(self.task, "max_episode_length", None) or getattr(self.env, "max_episode_length", 1000)
        self.agent.enable_training_mode(False)
        self.agent.enable_models_training_mode(False)

        def act(observations: torch.Tensor) -> torch.Tensor:
            return self.agent.act(observations, self.env.state(), timestep=0, timesteps=0)[1]["mean_actions"]

        return evaluate(self.env, act, episodes=episodes, max_length=int(max_length))

    def test(self) -> float | None:
        self.load_state_dict(self._resume_state, source=self.resume_from, models_only=True)
        mean_return = self.evaluate(self.cfg.test_episodes)
        self._finish_outputs()
        return mean_return

    def _plot(self, summary: Summary) -> None:
        from omni_sfp.plots import learning_curve

        steps_per_iteration = self.env.num_envs * distributed.world_size()
        history = summary.history
        evaluations = ()
        if summary.final_return is not None and history:
            evaluations = [(history[-1].timestep * steps_per_iteration, summary.final_return)]
        learning_curve([(p.timestep * steps_per_iteration, p.mean_return) for p in history],
                       self.run_dir / "learning_curve.png", title=f"{self.cfg.task.name}: {summary.line()}",
                       optimal_return=summary.optimal_return, evaluations=evaluations)
