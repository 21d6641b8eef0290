"""From a validated config to a finished run: task -> env -> model (cache) -> SFPPPO -> loop.Learner -> run folder.

This module builds the pieces and calls :meth:`omni_sfp.ppo.loop.Learner.learn`, where the iteration happens.
The pieces around the loop live in their own modules: the run folder, checkpoints and resuming in
:mod:`omni_sfp.run.folder`, progress output and the summary in :mod:`omni_sfp.run.progress`. What the run leaves
behind (the final evaluation, the learning curve, video, the exported policy, W&B) are outputs
(:mod:`omni_sfp.run.outputs`): the runner keeps a list of them and calls each at the same points, handing them a
:class:`~omni_sfp.run.outputs.base.RunContext` (what they may read of the run), never itself.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from omegaconf import DictConfig, OmegaConf
from skrl.resources.schedulers.torch import KLAdaptiveLR

from omni_sfp.compute import distributed
from omni_sfp.compute.compile_policy import AutoCapture, AutoCompile, compile_trunk
from omni_sfp.compute.cpu_choices import apply_config
from omni_sfp.compute.device import resolve_device
from omni_sfp.config.schema import AUTO
from omni_sfp.config.values import isaaclab_overrides, max_iterations, num_envs
from omni_sfp.envs.registry import make_env
from omni_sfp.ppo.agent import SFPPPO
from omni_sfp.ppo.loop import Learner, Progress, StopRequested
from omni_sfp.ppo.scaler import flat_parts_of, scaler_class
from omni_sfp.run import checkpoint as ckpt
from omni_sfp.run.folder import (
    Checkpoints,
    check_resumable,
    config_file,
    forget_after,
    make_run_dir,
    record_setting,
)
from omni_sfp.run.outputs.base import RunContext, RunOutput, check_config, outputs_for
from omni_sfp.run.outputs.evaluation import FinalEvaluation, evaluate_agent
from omni_sfp.run.progress import ProgressOutput, Summary
from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network

OutputT = TypeVar("OutputT", bound=RunOutput)


def rewards_scaler(scale: float) -> Callable:
    def shape(rewards: torch.Tensor, timestep: int, timesteps: int) -> torch.Tensor:
        return rewards * scale

    return shape


def network_spec(cfg: DictConfig, env) -> network.NetworkSpec:
    """The spec the task trains with: ``train.models.network`` (the registered network, or the user's), else our
    default for the task's spaces (the tuned MLP of ``units`` on a flat ``Box``).

    :raises network.NetworkSpecError: a spec that does not fit, or a space no default covers (one line).
    """
    m = cfg.train.models
    if m.network is not None:
        models = OmegaConf.to_container(m.network, resolve=True)
    else:
        models = network.default_spec(
            env.observation_space,
            env.action_space,
            units=list(m.units),
            activation=m.activation,
            separate=m.separate,
            initial_log_std=m.initial_log_std,
            task=cfg.task.name,
        )
    return dataclasses.replace(network.parse(models), separate=bool(m.separate))  # one key decides: models.separate


def build_models(cfg: DictConfig, env, device: torch.device) -> dict[str, Any]:
    """The task's models through the one builder (:func:`omni_sfp.sfp.models.build_models`);
    ``train.models.compile=true`` compiles their trunks now (``auto`` decides later: Runner, AutoCompile)."""
    m = cfg.train.models
    models = sfp_models.build_models(
        network_spec(cfg, env),
        env.observation_space,
        env.action_space,
        device,
        num_envs=env.num_envs,
        state_space=getattr(env, "state_space", None),
        init=m.init,
        single_forward_pass=cfg.train.sfp.enabled,
        cache_check=cfg.train.sfp.cache_check,
    )
    if m.compile is True:
        for trunk in model_trunks(models):
            compile_trunk(trunk)  # inside the cache: its keys stay in Python
    return models


def model_trunks(models: dict[str, Any]) -> list[torch.nn.Module]:
    """Every trunk of the agent's models, once (a shared model is both roles)."""
    return [trunk for model in dict.fromkeys(models.values()) for trunk in sfp_models.trunks(model)]


def observation_normalization(cfg: DictConfig, env) -> bool:
    """``train.ppo.observation_normalization``, with ``auto`` resolved: on where the observations have a flat
    ``Box`` part (off for an image, ``Discrete`` or ``MultiDiscrete`` alone)."""
    value = cfg.train.ppo.observation_normalization
    if value == AUTO:
        return bool(flat_parts_of(env.observation_space).any())
    return bool(value)


def _normaliser_kwargs(space: Any, device: torch.device) -> dict[str, Any]:
    """The normaliser's arguments for ``space``: a ``Dict`` or ``Tuple`` with images or discrete entries beside flat
    ones gets its flat parts only normalised (:func:`omni_sfp.ppo.scaler.flat_parts_of`)."""
    kwargs: dict[str, Any] = {"size": space, "device": device}
    flat = flat_parts_of(space)
    if flat.any() and not flat.all():
        kwargs["flat_parts"] = flat
    return kwargs


def ppo_cfg(cfg: DictConfig, env, device: torch.device, run_dir: Path | None, *, scaler: type | None = None):
    """skrl's ``PPO_CFG`` for a validated config (also used by the benchmark's plain-skrl rows, which pass
    skrl's own ``RunningStandardScaler`` as ``scaler``)."""
    from skrl.agents.torch.ppo import PPO_CFG

    p = cfg.train.ppo
    if scaler is None:  # skrl's RunningStandardScaler, cheaper to apply; pooled over the ranks when distributed
        scaler = scaler_class()
    normalise = observation_normalization(cfg, env)
    state_space = getattr(env, "state_space", None)
    agent_cfg = PPO_CFG(
        rollouts=p.rollouts,
        learning_epochs=p.learning_epochs,
        mini_batches=p.mini_batches,
        discount_factor=p.discount_factor,
        gae_lambda=p.gae_lambda,
        learning_rate=p.learning_rate,
        learning_rate_scheduler=KLAdaptiveLR if p.learning_rate_schedule == "kl_adaptive" else None,
        learning_rate_scheduler_kwargs={"kl_threshold": p.desired_kl, "max_lr": p.max_learning_rate}
        if p.learning_rate_schedule == "kl_adaptive"
        else {},
        observation_preprocessor=scaler if normalise else None,
        observation_preprocessor_kwargs=_normaliser_kwargs(env.observation_space, device),
        state_preprocessor=scaler if normalise and state_space is not None else None,
        state_preprocessor_kwargs=_normaliser_kwargs(state_space, device) if state_space is not None else {},
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


def kl_rate_bound(cfg: DictConfig) -> float | None:
    """The KL-adaptive rate's bound where it is not annealed (it stays where a sure policy drives the rate), else
    None."""
    p = cfg.train.ppo
    return (
        float(p.max_learning_rate) if p.learning_rate_schedule == "kl_adaptive" and not p.learning_rate_anneal else None
    )


def build_agent(cfg: DictConfig, env, models: dict, device: torch.device, run_dir: Path | None) -> SFPPPO:
    from skrl.memories.torch import RandomMemory

    p = cfg.train.ppo
    memory = RandomMemory(memory_size=p.rollouts, num_envs=env.num_envs, device=device)
    agent = SFPPPO(
        models=models,
        memory=memory,
        observation_space=env.observation_space,
        state_space=getattr(env, "state_space", None),
        action_space=env.action_space,
        device=device,
        cfg=ppo_cfg(cfg, env, device, run_dir),
        check_finite=cfg.train.check_finite,
        fused_optimizer=p.fused_optimizer,
        bounds_loss_scale=p.bounds_loss_scale,
        learning_rate_anneal=p.learning_rate_anneal,
    )
    agent.init()  # memory tensors; the TensorBoard writer when there is a run folder
    return agent


class Runner:
    """Builds everything from a validated config; ``train()`` and ``test()`` run it.

    The outputs' settings, and a checkpoint to resume from (``checkpoint=``), are checked against the config
    before any environment is built, so a wrong value or file costs no simulation start-up.

    :raises OutputError: an output's bad setting or missing package (:func:`omni_sfp.run.outputs.base.check_config`).
    """

    def __init__(self, cfg: DictConfig, *, disable_progressbar: bool | None = None) -> None:
        from skrl.utils import set_seed

        check_config(cfg)
        self.cfg = cfg
        self.rank, self.world_size = distributed.rank(), distributed.world_size()
        self.device = resolve_device(cfg.device)
        self.cpu_choices = apply_config(cfg, self.device)  # ELU kernels, allocator, threads, Adam: measured per CPU
        which = cfg.test_checkpoint if cfg.test else "last"
        self.resume_from: Path | None = ckpt.resolve(cfg.checkpoint, which) if cfg.checkpoint else None
        self._resume_state: dict[str, Any] | None = None
        if self.resume_from is not None:
            self._resume_state = ckpt.load(self.resume_from, self.device)
            if not cfg.test:
                check_resumable(cfg, self._resume_state, self.resume_from)
        set_seed(cfg.seed, deterministic=cfg.torch_deterministic)  # skrl adds the rank when distributed
        self.run_dir = None
        if not cfg.test and self.rank == 0:
            resumed_at = self._resume_state["iteration"] if self._resume_state is not None else None
            self.run_dir = make_run_dir(cfg, self.resume_from, resumed_at)
            self.config_file = config_file(self.run_dir, cfg, resumed_at)
        # what the run leaves behind besides checkpoints and progress (omni_sfp/run/outputs/base.py)
        self.outputs = outputs_for(cfg, main=self.rank == 0)
        task_cfg = {k: v for k, v in OmegaConf.to_container(cfg.task.env, resolve=True).items() if k != "num_envs"}
        for output in self.outputs:
            task_cfg.update(output.env_options())
        if isaaclab_overrides(cfg):  # presets=, physics=, renderer=: validated for Isaac Lab tasks only
            task_cfg["overrides"] = isaaclab_overrides(cfg)
        self.env = make_env(
            cfg.task.name,
            num_envs=num_envs(cfg),
            device=self.device,
            seed=cfg.seed + self.rank,
            headless=cfg.headless,
            task_cfg=task_cfg,
        )
        self.outputs_dir = self._outputs_dir()  # videos/ and exported/ (None on ranks > 0)
        for output in self.outputs:
            self.env = output.wrap_env(self.env, self.outputs_dir)
        self.models = build_models(cfg, self.env, self.device)
        if self.rank == 0:
            print(f"[omni_sfp] network: {sfp_models.describe(self.models)}", flush=True)
        self.agent = build_agent(cfg, self.env, self.models, self.device, self.run_dir)
        self.learner = Learner(self.env, self.agent, iterations=max_iterations(cfg), log=self._log)
        self.checkpoints = Checkpoints(cfg, self.learner, self.run_dir)  # reads the learner's position
        self.learner.checkpoint = self.checkpoints.after_iteration
        self.auto_capture: AutoCapture | None = None  # train.capture=auto: decides after 2 eager iterations
        self.auto_compile: AutoCompile | None = None  # train.models.compile=auto: likewise, when nothing captures
        switch = {
            "iterations": self.learner.iterations,
            "device_type": self.device.type,
            "mixed_precision": cfg.train.mixed_precision,
            "agree": lambda flag: distributed.any_rank(flag, self.device),
            "report": self._note if self.run_dir is not None else None,
        }
        graph = self.device.type == "cuda"
        if cfg.train.capture is True and not cfg.test:
            self.agent.set_capture("graph" if graph else "compile")  # a step that cannot be: one line, exit 2
        elif cfg.train.capture == "auto" and not cfg.test and self.agent.capture_problem(graph=graph) is None:
            self.auto_capture = AutoCapture(self.agent, record=self._record_capture, **switch)
            self.agent.capture_fallback = switch["report"] or (lambda reason: None)
            self.learner.tune = self.auto_capture  # the captured step compiles the trunk with the rest
        compile_auto = cfg.train.models.compile == "auto" and not cfg.test
        if compile_auto and self.auto_capture is None and self.agent.capture == "off":
            self.auto_compile = AutoCompile(model_trunks(self.models), **switch)
            self.learner.tune = self.auto_compile
        self.context = RunContext(  # what the outputs read of this run
            cfg=cfg,
            agent=self.agent,
            env=self.env,
            run_dir=self.run_dir,
            outputs_dir=self.outputs_dir,
            world_size=self.world_size,
            position=lambda: self.learner.iteration,
        )
        self.disable_progressbar = disable_progressbar
        self.history: list[Progress] = []
        self._output: ProgressOutput | None = None
        if self.run_dir is not None:
            self._note(self.cpu_choices.line())

    @property
    def task(self):
        """The embedded task object behind skrl's wrapper (None for other kinds)."""
        return getattr(self.env, "_env", None)

    @property
    def iteration(self) -> int:
        return self.learner.iteration

    @property
    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint this run wrote (None before the first, and on ranks > 0)."""
        return self.checkpoints.last

    def load_state_dict(self, state: dict[str, Any], *, source: Path, models_only: bool = False) -> None:
        """Restore a checkpoint (:meth:`omni_sfp.run.folder.Checkpoints.load_state_dict`)."""
        self.checkpoints.load_state_dict(state, source=source, models_only=models_only)

    @property
    def _cache_in_use(self) -> bool:
        return self.agent.shares_trunk

    # -- train / test -------------------------------------------------------------------------------------------
    def train(self) -> Summary:
        cfg = self.cfg
        main = self.run_dir is not None
        try:
            with StopRequested() as stop:
                self.learner.stop = stop
                if self._resume_state is not None:
                    self.load_state_dict(self._resume_state, source=self.resume_from)
                    self._resume_state = None
                    if main and cfg.resume:
                        forget_after(self.run_dir, self.learner.iteration, self.agent, cfg.train.ppo.rollouts)
                if main:
                    self._output = ProgressOutput(
                        [self.run_dir / "progress.jsonl", *([Path(cfg.progress_file)] if cfg.progress_file else [])],
                        self.agent,
                        iterations=self.learner.iterations,
                        start_iteration=self.learner.iteration,
                        console="bar" if sys.stdout.isatty() and not self.disable_progressbar else "lines",
                        cache_in_use=self._cache_in_use,
                    )
                for output in self.outputs:
                    output.start(self.context)
                start = time.perf_counter()
                try:
                    self.learner.learn()
                finally:
                    if self._output is not None:
                        self._output.close()
                elapsed = time.perf_counter() - start
            learner = self.learner
            steps_done = (learner.iteration - learner.start_iteration) * cfg.train.ppo.rollouts * self.env.num_envs
            steps_done *= self.world_size
            task = self.task
            summary = Summary(
                training_time_s=elapsed,
                sps=steps_done / elapsed if elapsed > 0 else 0.0,
                sfp_hit_rate=self.agent.sfp_share_rate if self._cache_in_use else None,
                final_return=None,  # the final evaluation's (omni_sfp/run/outputs/evaluation.py)
                optimal_return=task.optimal_return() if hasattr(task, "optimal_return") else None,
                iterations=learner.iteration,
                run_dir=self.run_dir,
                history=self.history,
                interrupted=stop.signal_name,
                checkpoint=self.checkpoints.last,
                best_iteration=self.checkpoints.best_iteration,
                rate_bound=kl_rate_bound(cfg),
            )
            for output in self.outputs:
                output.end(self.context, summary)
        finally:
            for output in self.outputs:
                output.close()
        return summary

    def evaluate(self, episodes: int) -> float | None:
        """Mean return of the first ``episodes`` episodes of every env, with deterministic (mean) actions."""
        return evaluate_agent(self.agent, self.env, episodes)

    def test(self) -> float | None:
        """``test=true``: the checkpoint's models, evaluated for ``test_episodes`` episodes per env; the outputs
        (video, export) end with it."""
        self.load_state_dict(self._resume_state, source=self.resume_from, models_only=True)
        try:
            for output in self.outputs:
                output.end(self.context, None)
        finally:
            for output in self.outputs:
                output.close()
        return self.output(FinalEvaluation).mean_return

    def played(self) -> str:
        """Which checkpoint ``test=true`` plays, for its result line: the file's name, its iteration, and for
        ``best.pt`` the training return that made it the best."""
        state = self._resume_state or {}
        name = self.resume_from.name if self.resume_from is not None else "?"
        what = f"{name}: iteration {state.get('iteration')}"
        if name == "best.pt" and isinstance(state.get("best_return"), float):
            what += f", training return {state['best_return']:.2f}"
        return what

    def output(self, kind: type[OutputT]) -> OutputT | None:
        """This run's output of that kind (e.g. :class:`omni_sfp.run.outputs.export.Export`); None when the
        config does not ask for it."""
        return next((output for output in self.outputs if isinstance(output, kind)), None)

    # -- the loop's log callback and the outputs around the run -------------------------------------------------
    def _log(self, progress: Progress, losses: dict[str, float]) -> None:
        self.history.append(progress)
        if self._output is not None:
            self._output.write(progress, losses)
        else:
            self.agent.tracking_data.clear()  # nobody writes it out: do not let it grow for the whole run
        for output in self.outputs:
            output.after_iteration(self.context, progress)

    def _record_capture(self, captured: bool) -> None:
        """``train.capture=auto``'s outcome, into the run's config file (rank 0)."""
        if self.run_dir is not None:
            record_setting(self.config_file, "train.capture", captured)

    def _note(self, line: str) -> None:
        """One line for rank 0's console (through the progress bar, if any), kept in the run folder's notes.txt."""
        if self._output is not None:
            self._output.note(line)
        else:
            print(line, flush=True)
        with open(self.run_dir / "notes.txt", "a") as notes:
            notes.write(line + "\n")

    def _outputs_dir(self) -> Path | None:
        """Where videos and the exported policy go: the run folder, or with test=true the checkpoint's run folder
        (Isaac Lab's play.py writes there too), else the checkpoint's own folder."""
        if self.run_dir is not None or self.rank != 0:
            return self.run_dir
        return ckpt.run_folder_of(self.resume_from) or self.resume_from.parent
