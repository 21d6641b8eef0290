"""Quality mode: does the single forward pass, or mixed precision, change what PPO learns?

Every configuration (single / double pass x fp32 / mixed) trains N seeds on learnable embedded tasks with the
real runner; the final deterministic returns are compared with Welch's t-test (unequal variances, as the
configurations may differ in spread). Single and double pass would be identical with exact arithmetic; they
differ by the order of floating-point summation in the backward pass, so runs diverge slowly, which is
why this is a statistical question.

Two peer rows train the same embedded task and seeds with the same resolved config: rl_games 1.6.5 (driven as
OmniIsaacGymEnvs drives it, settings mapped one to one) and plain skrl PPO. They answer whether a learning
problem is omni-sfp's or PPO's at those settings. Each row reports the fraction of seeds that solved the task.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats
from skrl.envs.wrappers.torch.base import Wrapper

from omni_sfp.ppo.agent import EpisodeTracker
from omni_sfp.run.outputs.evaluation import evaluate

ENV_NAME = "omni_sfp_quality"

ALPHA = 0.05


@dataclass(frozen=True)
class QualityConfig:
    """One row: which trainer, and for omni-sfp's runner whether the trunk runs once and autocast is on."""

    key: str  # what ``quality --configs`` selects it by
    name: str
    single_forward_pass: bool = True
    mixed_precision: bool = False
    trainer: str = "omni-sfp"  # omni-sfp (the runner) | rl_games | skrl (plain PPO, double-pass shared model)
    # the task's recurrent network without its recurrent layer: an MLP of the same widths (rnn.hidden_size, then the
    # containers' layers), to show what the memory is worth on a partially observed task; only when asked for
    feed_forward: bool = False


CONFIGS = (
    QualityConfig("sfp-fp32", "single pass, fp32", True, False),
    QualityConfig("double-fp32", "double pass, fp32", False, False),
    QualityConfig("sfp-mixed", "single pass, mixed", True, True),
    QualityConfig("double-mixed", "double pass, mixed", False, True),
    QualityConfig("rl_games", "rl_games 1.6.5, fp32", trainer="rl_games"),
    QualityConfig("skrl", "skrl PPO, fp32", trainer="skrl"),
    QualityConfig("mlp-fp32", "feed-forward MLP of the same widths, fp32", feed_forward=True),
)
CONFIG_KEYS = tuple(c.key for c in CONFIGS)
DEFAULT_CONFIGS = tuple(c for c in CONFIGS if not c.feed_forward)  # the feed-forward row needs a recurrent task
# (what is compared, config a, config b): each pair differs in one setting only
COMPARISONS = (
    ("single vs double pass, fp32", "single pass, fp32", "double pass, fp32"),
    ("single vs double pass, mixed", "single pass, mixed", "double pass, mixed"),
    ("mixed vs fp32, single pass", "single pass, mixed", "single pass, fp32"),
    ("mixed vs fp32, double pass", "double pass, mixed", "double pass, fp32"),
    ("omni-sfp vs rl_games", "single pass, fp32", "rl_games 1.6.5, fp32"),
    ("omni-sfp vs skrl PPO", "single pass, fp32", "skrl PPO, fp32"),
    ("recurrent vs feed-forward, fp32", "single pass, fp32", "feed-forward MLP of the same widths, fp32"),
)
CARTPOLE_SOLVED = 475.0  # deterministic return (of 500) that counts as balanced
# without velocities (CartpolePositions) the policy must estimate them from what it saw: balanced is >= 450
PARTIAL_CARTPOLE_SOLVED = 450.0
LQR_SOLVED_RATIO = 1.25  # cost within this factor of the Riccati optimum counts as solved
# Gymnasium MuJoCo: a published PPO baseline at 1M env steps (RL Baselines3 Zoo's benchmark.md: Stable Baselines3
# PPO, the Zoo's tuned hyperparameters, deterministic evaluation; v3 tasks, docs/mujoco.md says how v5 differs)
REFERENCE_RETURNS = {
    "gym:Hopper-v5": (2410.0, "RL Baselines3 Zoo PPO, Hopper-v3, 1M steps"),
    "gym:HalfCheetah-v5": (5819.0, "RL Baselines3 Zoo PPO, HalfCheetah-v3, 1M steps"),
    "gym:Ant-v5": (1327.0, "RL Baselines3 Zoo PPO, Ant-v3, 1M steps"),
}


def solved(final_return: float | None, optimal_return: float | None, task: str) -> bool | None:
    """Whether a run solved its task: Cartpole >= 475 of 500; a task with a known (negative) optimal return
    within ``LQR_SOLVED_RATIO`` of its cost; a MuJoCo task at least its published reference
    (``REFERENCE_RETURNS``); None where the task has no criterion."""
    if final_return is None:
        return False
    if optimal_return is not None and optimal_return < 0:
        return final_return >= LQR_SOLVED_RATIO * optimal_return
    if task == "Cartpole":
        return final_return >= CARTPOLE_SOLVED
    if task == "CartpolePositions":
        return final_return >= PARTIAL_CARTPOLE_SOLVED
    if task in REFERENCE_RETURNS:
        return final_return >= REFERENCE_RETURNS[task][0]
    return None


def select_configs(keys: str | None) -> tuple[QualityConfig, ...]:
    """The rows named in ``keys`` (comma-separated, see :data:`CONFIG_KEYS`), all of them when None.

    :raises ValueError: an unknown key.
    """
    if keys is None:
        return DEFAULT_CONFIGS
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in CONFIG_KEYS]
    if unknown or not wanted:
        raise ValueError(
            f"unknown quality configuration {', '.join(map(repr, unknown)) or repr(keys)}; "
            f"choose from {', '.join(CONFIG_KEYS)}"
        )
    return tuple(c for c in CONFIGS if c.key in wanted)


def welch(name: str, a: list[float], b: list[float], alpha: float = ALPHA) -> dict[str, Any]:
    """Welch's t-test of ``a`` against ``b`` and a one-line verdict."""
    mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
    means = f"mean {mean_a:.2f} vs {mean_b:.2f}"
    if len(a) < 2 or len(b) < 2:
        return {
            "name": name,
            "p_value": None,
            "significant": None,
            "verdict": f"{name}: undetermined, needs at least 2 seeds per configuration ({means})",
        }
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # both samples constant: the test is undefined
        same = mean_a == mean_b
        return {
            "name": name,
            "p_value": None,
            "significant": not same,
            "verdict": f"{name}: {'identical results' if same else 'different constant results'} ({means})",
        }
    p_value = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    significant = p_value < alpha
    if significant:
        verdict = f"{name}: significant difference, {means} (Welch p={p_value:.3f} < {alpha})"
    else:
        verdict = f"{name}: no significant difference, {means} (Welch p={p_value:.3f} >= {alpha})"
    return {"name": name, "p_value": p_value, "significant": significant, "verdict": verdict}


def _config(
    task: str,
    seed: int,
    device: str,
    runs_dir: Path,
    iterations: int | None,
    overrides: Sequence[str],
    extra: Sequence[str] = (),
):
    from omni_sfp.run.compose import load_config

    base = [f"task={task}", f"seed={seed}", f"device={device}", f"runs_dir={runs_dir}", *extra]
    if iterations is not None:
        base.append(f"max_iterations={iterations}")
    return load_config([*base, *overrides])


def feed_forward_overrides(task: str, overrides: Sequence[str] = ()) -> list[str]:
    """The overrides that train ``task``'s recurrent network as an MLP of the same widths: the tuned MLP models with
    units ``[rnn.hidden_size, *the containers' linear layers]`` and the containers' activation.

    :raises ValueError: the task's network has no ``rnn`` block (one line).
    """
    from omegaconf import OmegaConf

    from omni_sfp.run.compose import load_config

    models = OmegaConf.to_container(load_config([f"task={task}", *overrides]).train.models, resolve=True)
    spec = models.get("network") or {}
    if not spec.get("rnn"):
        raise ValueError(f"quality row mlp-fp32: task {task!r} trains no recurrent network (train.models.network.rnn)")
    containers = spec["policy"]["network"]
    units = [int(spec["rnn"].get("hidden_size", 64))] + [
        int(layer) for c in containers for layer in c.get("layers", []) if isinstance(layer, int)
    ]
    activation = containers[-1].get("activations") or models.get("activation", "elu")
    activation = activation[0] if isinstance(activation, list) else activation
    return [
        "train.models.network=null",
        f"train.models.units=[{','.join(map(str, units))}]",
        f"train.models.activation={activation}",
    ]


def train_once(
    task: str,
    config: QualityConfig,
    seed: int,
    *,
    device: str,
    runs_dir: Path,
    iterations: int | None,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """One training run; its final deterministic return and its learning curve.

    ``overrides`` (``key=value`` as for ``python -m omni_sfp.train``) apply to every trainer: the rl_games and
    skrl rows read the same resolved config, mapped one to one (:func:`rlgames_params`)."""
    if config.trainer == "rl_games":
        return _train_rlgames(task, seed, device=device, runs_dir=runs_dir, iterations=iterations, overrides=overrides)
    if config.trainer == "skrl":
        return _train_skrl(task, seed, device=device, runs_dir=runs_dir, iterations=iterations, overrides=overrides)
    from omni_sfp.run.runner import Runner

    cfg = _config(
        task,
        seed,
        device,
        runs_dir,
        iterations,
        overrides,
        [
            f"train.mixed_precision={str(config.mixed_precision).lower()}",
            f"train.sfp.cache_check={'auto' if config.single_forward_pass else 'off'}",
            *(feed_forward_overrides(task, overrides) if config.feed_forward else []),
        ],
    )
    runner = Runner(cfg, disable_progressbar=True)
    summary = runner.train()
    return {
        "final_return": summary.final_return,
        "optimal_return": summary.optimal_return,
        "curve": [(p.timestep * runner.env.num_envs, p.mean_return) for p in summary.history],
        "training_time_s": summary.training_time_s,
        "env_steps": summary.iterations * cfg.train.ppo.rollouts * runner.env.num_envs,
        "best_training_mean": summary.best_mean[0] if summary.best_mean is not None else None,
        "best_checkpoint_return": summary.best_checkpoint_return,
        "kept": summary.kept,
        "sfp_share_rate": runner.agent.sfp_share_rate,  # cache hits per shareable trunk call
    }


class EpisodeRecorder(Wrapper):
    """Passes a skrl-wrapped env through and keeps the returns of the episodes it finishes (on the device),
    so every trainer's learning curve is measured by the same code."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.tracker = EpisodeTracker(env.num_envs, env.device)
        self.steps = 0
        self.curve: list[tuple[int, float | None]] = []

    def reset(self):
        return self._env.reset()

    def step(self, actions):
        observations, rewards, terminated, truncated, infos = self._env.step(actions)
        self.tracker.record(rewards, terminated | truncated)
        self.steps += 1
        return observations, rewards, terminated, truncated, infos

    def state(self):
        return self._env.state()

    def render(self, *args, **kwargs):
        return None

    def close(self) -> None:
        self._env.close()

    def point(self) -> None:
        """One curve point: env steps so far and the mean return of the episodes finished since the last."""
        mean_return, _, _ = self.tracker.pop()
        self.curve.append((self.steps * self.num_envs, mean_return))


def _peer_env(cfg):
    """The task as the runner builds it, wrapped in an :class:`EpisodeRecorder`."""
    from omegaconf import OmegaConf

    from omni_sfp.compute.device import resolve_device
    from omni_sfp.config.values import num_envs
    from omni_sfp.envs.registry import make_env

    device = resolve_device(cfg.device)
    task_cfg = {k: v for k, v in OmegaConf.to_container(cfg.task.env, resolve=True).items() if k != "num_envs"}
    env = make_env(
        cfg.task.name, num_envs=num_envs(cfg), device=device, seed=cfg.seed, headless=True, task_cfg=task_cfg
    )
    return EpisodeRecorder(env), device


def _optimal_and_length(env) -> tuple[float | None, int]:
    task = env.unwrapped
    optimal = task.optimal_return() if hasattr(task, "optimal_return") else None
    return optimal, int(getattr(task, "max_episode_length", 1000))


def rlgames_params(cfg, *, device: str, train_dir: str, threads: int) -> dict[str, Any]:
    """rl_games 1.6.5 parameters equal to a resolved omni-sfp config, key by key, in OmniIsaacGymEnvs'
    ``CartpolePPO.yaml`` layout (shared ``actor_critic`` MLP, fixed sigma). rl_games halves its critic loss,
    so ``critic_coef`` is twice skrl's ``value_loss_scale``; it clips the value by ``e_clip``, so
    ``value_clip`` must equal ``ratio_clip`` (or be 0); its KL-adaptive schedule steps per minibatch
    (skrl's: per epoch). ``bounds_loss_coef`` is ``train.ppo.bounds_loss_scale`` (our update has rl_games'
    bound loss; plain skrl's PPO has none)."""
    from omni_sfp.config.values import num_envs

    t, p = cfg.train, cfg.train.ppo
    if p.value_clip and p.value_clip != p.ratio_clip:
        raise ValueError(
            f"rl_games clips the value by e_clip: value_clip {p.value_clip} must equal ratio_clip "
            f"{p.ratio_clip} or be 0"
        )
    if p.kl_threshold:
        raise ValueError("rl_games has no KL early stop: set train.ppo.kl_threshold=0 for the rl_games row")
    envs = num_envs(cfg)
    return {
        "params": {
            "seed": int(cfg.seed),
            "torch_threads": threads,
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": bool(t.models.separate),
                "space": {
                    "continuous": {
                        "mu_activation": "None",
                        "sigma_activation": "None",
                        "mu_init": {"name": "default"},
                        "sigma_init": {"name": "const_initializer", "val": float(t.models.initial_log_std)},
                        "fixed_sigma": True,
                    }
                },
                "mlp": {
                    "units": list(t.models.units),
                    "activation": t.models.activation,
                    "d2rl": False,
                    "initializer": {"name": "default"},
                    "regularizer": {"name": "None"},
                },
            },
            "config": {
                "name": "quality",
                "full_experiment_name": "quality",
                "env_name": ENV_NAME,
                "device": device,
                "device_name": device,
                "multi_gpu": False,
                "ppo": True,
                "mixed_precision": bool(t.mixed_precision),
                "normalize_input": bool(p.observation_normalization),
                "normalize_value": bool(p.value_normalization),
                "value_bootstrap": bool(p.time_limit_bootstrap),
                "num_actors": envs,
                "reward_shaper": {"scale_value": float(p.rewards_scale)},
                "normalize_advantage": True,
                "gamma": float(p.discount_factor),
                "tau": float(p.gae_lambda),
                "learning_rate": float(p.learning_rate),
                # rl_games' linear schedule is our anneal of a fixed rate; its adaptive one has no anneal
                "lr_schedule": "adaptive"
                if p.learning_rate_schedule == "kl_adaptive"
                else ("linear" if p.learning_rate_anneal else None),
                "schedule_type": "legacy",
                "kl_threshold": float(p.desired_kl),
                "score_to_win": math.inf,
                "max_epochs": int(cfg.max_iterations or t.max_iterations),
                "save_best_after": int(cfg.max_iterations or t.max_iterations) + 1,
                "save_frequency": 0,
                "grad_norm": float(p.grad_norm_clip) or 1.0,
                "truncate_grads": bool(p.grad_norm_clip),
                "entropy_coef": float(p.entropy_loss_scale),
                "e_clip": float(p.ratio_clip),
                "clip_value": bool(p.value_clip),
                "horizon_length": int(p.rollouts),
                "minibatch_size": envs * int(p.rollouts) // int(p.mini_batches),
                "mini_epochs": int(p.learning_epochs),
                "critic_coef": 2.0 * float(p.value_loss_scale),
                "seq_length": 4,
                "bounds_loss_coef": float(p.bounds_loss_scale),
                "train_dir": train_dir,
                "torch_compile": False,
            },
        }
    }


def _train_rlgames(
    task: str, seed: int, *, device: str, runs_dir: Path, iterations: int | None, overrides: Sequence[str]
) -> dict[str, Any]:
    """rl_games 1.6.5 on the same env and config, driven as :mod:`omni_sfp.bench.rlgames` drives it."""
    from rl_games.common import env_configurations, vecenv
    from rl_games.common.algo_observer import AlgoObserver
    from rl_games.torch_runner import Runner as RLGamesRunner

    from omni_sfp.bench.rlgames import SkrlToRLGames

    cfg = _config(task, seed, device, runs_dir, iterations, overrides)
    env, torch_device = _peer_env(cfg)
    optimal, max_length = _optimal_and_length(env)

    class Observer(AlgoObserver):
        algo = None

        def after_init(self, algo) -> None:
            Observer.algo = algo

        def after_print_stats(self, frame, epoch_num, total_time) -> None:
            env.point()

    name = str(torch_device)
    name = "cuda:0" if name == "cuda" else name
    vecenv.register(
        "OMNI_SFP_QUALITY", lambda config_name, num_actors, **kw: SkrlToRLGames(config_name, num_actors, **kw)
    )
    env_configurations.register(ENV_NAME, {"vecenv_type": "OMNI_SFP_QUALITY", "env_creator": lambda **kw: env})
    runner = RLGamesRunner(Observer())
    runner.load(
        rlgames_params(
            cfg, device=name, train_dir=str(runs_dir / f"rl_games_{task}_{seed}"), threads=torch.get_num_threads()
        )
    )
    runner.reset()
    start = time.perf_counter()
    runner.run({"train": True, "play": False, "checkpoint": "", "sigma": None})
    training_time = time.perf_counter() - start
    algo = Observer.algo
    algo.model.eval()
    space = env.action_space
    bounded = bool(np.isfinite(space.low).all() and np.isfinite(space.high).all())

    def act(observations: torch.Tensor) -> torch.Tensor:  # rl_games' deterministic player: the mean action
        mu = algo.model({"is_train": False, "prev_actions": None, "obs": algo._preproc_obs(observations)})["mus"]
        return mu.clamp(-1.0, 1.0) if bounded else mu  # bounds are [-1, 1] where bounded: no rescaling needed

    return {
        "final_return": evaluate(env, act, episodes=1, max_length=max_length),
        "optimal_return": optimal,
        "curve": env.curve,
        "training_time_s": training_time,
    }


def _train_skrl(
    task: str, seed: int, *, device: str, runs_dir: Path, iterations: int | None, overrides: Sequence[str]
) -> dict[str, Any]:
    """Plain skrl PPO under skrl's SequentialTrainer, with skrl's own shared model in its correct double-pass
    mode (its unkeyed single forward pass serves stale features to the bootstrap calls, see the README)."""
    from skrl.memories.torch import RandomMemory
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg
    from skrl.utils import set_seed

    from omni_sfp.bench.skrl_builtin import TimedPPO, skrl_shared_model
    from omni_sfp.run.runner import ppo_cfg

    cfg = _config(task, seed, device, runs_dir, iterations, overrides)
    set_seed(int(cfg.seed))
    env, torch_device = _peer_env(cfg)
    optimal, max_length = _optimal_and_length(env)
    m = cfg.train.models
    model = skrl_shared_model(
        env,
        torch_device,
        units=m.units,
        activation=m.activation,
        initial_log_std=m.initial_log_std,
        single_forward_pass=False,
    )
    rollouts = int(cfg.train.ppo.rollouts)
    agent = TimedPPO(
        models={"policy": model, "value": model},
        memory=RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=torch_device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=torch_device,
        cfg=ppo_cfg(cfg, env, torch_device, run_dir=None, scaler=RunningStandardScaler),
        on_update=env.point,
    )
    updates = int(cfg.max_iterations or cfg.train.max_iterations)
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg=SequentialTrainerCfg(
            timesteps=updates * rollouts, headless=True, disable_progressbar=True, close_environment_at_exit=False
        ),
    )
    start = time.perf_counter()
    trainer.train()
    training_time = time.perf_counter() - start
    agent.enable_training_mode(False)
    agent.enable_models_training_mode(False)

    def act(observations: torch.Tensor) -> torch.Tensor:
        return agent.act(observations, None, timestep=0, timesteps=0)[1]["mean_actions"]

    return {
        "final_return": evaluate(env, act, episodes=1, max_length=max_length),
        "optimal_return": optimal,
        "curve": env.curve,
        "training_time_s": training_time,
    }


class _Inline:
    """The executor interface, running each job at once in this process (``workers=1``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _init_worker() -> None:
    torch.set_num_threads(1)


def _pool(workers: int):
    if workers <= 1:
        return _Inline()
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    )


def run_quality(
    *,
    tasks: list[str],
    seeds: Iterable[int],
    device: str,
    runs_dir: Path,
    iterations: int | None,
    log: Callable[[str], None],
    configs: Sequence[QualityConfig] = CONFIGS,
    overrides: Sequence[str] = (),
    workers: int = 1,
) -> dict[str, Any]:
    """Train every configuration once per seed and task (seed-major, so machine drift hits all alike).

    ``workers`` > 1 trains that many runs at once in separate processes (one torch thread each): a run's
    result depends only on its seed and config, not on what runs beside it."""
    results: dict[str, Any] = {}
    seeds = list(seeds)
    for task in tasks:
        jobs = [(task, config, seed) for seed in seeds for config in configs]
        finished = {}
        with _pool(workers) as pool:
            futures = {
                pool.submit(
                    train_once,
                    task,
                    config,
                    seed,
                    device=device,
                    runs_dir=runs_dir,
                    iterations=iterations,
                    overrides=overrides,
                ): (config, seed)
                for task, config, seed in jobs
            }
            for future in as_completed(futures):
                config, seed = futures[future]
                run = finished[(config.name, seed)] = future.result()
                log(
                    f"[quality] {task} seed {seed} {config.name}: final return {run['final_return']} "
                    f"({run['training_time_s']:.1f} s)"
                )
        runs = {c.name: [finished[(c.name, seed)] for seed in seeds] for c in configs}
        optimal = next((r["optimal_return"] for rs in runs.values() for r in rs), None)
        finals = {name: [r["final_return"] for r in rs if r["final_return"] is not None] for name, rs in runs.items()}
        configs_out = {}
        for name, rs in runs.items():
            f = finals[name]
            verdicts = [solved(r["final_return"], optimal, task) for r in rs]
            configs_out[name] = {
                "final_returns": f,
                "mean": float(np.mean(f)) if f else None,
                "std": float(np.std(f, ddof=1)) if len(f) > 1 else None,
                "solved": None if None in verdicts else sum(verdicts),
                "runs": len(rs),
                "training_time_s": float(np.mean([r["training_time_s"] for r in rs])),
                "curves": [r["curve"] for r in rs],
                "sfp_share_rates": [r.get("sfp_share_rate") for r in rs],
            }
        results[task] = {
            "optimal_return": optimal,
            "seeds": seeds,
            "overrides": list(overrides),
            "configs": configs_out,
            "tests": [
                welch(label, finals[a], finals[b]) for label, a, b in COMPARISONS if finals.get(a) and finals.get(b)
            ],
        }
    return results


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"# omni-sfp quality: {report['seeds']} seeds per configuration, {meta['date']}",
        "",
        f"- machine: {meta['cpu']}, device {meta['device']}; versions: torch {meta['torch']}, skrl {meta['skrl']}"
        f", rl_games {meta.get('rl_games')}",
        f"- command: `{meta['command']}`",
        "",
    ]
    for task, result in report["tasks"].items():
        optimal = result["optimal_return"]
        criterion = (
            f"cost within {LQR_SOLVED_RATIO}x of the optimum"
            if optimal is not None and optimal < 0
            else f"return >= {CARTPOLE_SOLVED:g}"
            if task == "Cartpole"
            else f"return >= {PARTIAL_CARTPOLE_SOLVED:g}"
            if task == "CartpolePositions"
            else f"return >= {REFERENCE_RETURNS[task][0]:g} ({REFERENCE_RETURNS[task][1]})"
            if task in REFERENCE_RETURNS
            else "no criterion"
        )
        lines += [
            f"## {task}" + (f" (optimal return {optimal:.2f})" if optimal is not None else ""),
            "",
            f"Solved: {criterion}. Final return: deterministic, one episode per env after training.",
            "",
            "| configuration | final return mean | std | min | solved | training time (s) | cache hits (lowest) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, c in result["configs"].items():
            f = c["final_returns"]
            mean = "" if c["mean"] is None else f"{c['mean']:.2f}"
            if optimal is not None and optimal < 0 and c["mean"] is not None:
                mean += f" ({c['mean'] / optimal:.3f}x optimal cost)"
            std = "" if c["std"] is None else f"{c['std']:.2f}"
            low = f"{min(f):.2f}" if f else ""
            won = "" if c.get("solved") is None else f"{c['solved']}/{c['runs']}"
            rates = [r for r in c.get("sfp_share_rates") or [] if r is not None]
            hits = f"{100 * min(rates):.1f}%" if rates else ""
            lines.append(f"| {name} | {mean} | {std} | {low} | {won} | {c.get('training_time_s', 0):.1f} | {hits} |")
        lines += [""] + [f"- {t['verdict']}" for t in result["tests"]] + [""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Learning curves: per task and configuration, the mean episode return over seeds, each seed faintly behind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, (task, result) in zip(axes[0], tasks.items()):
        for name, c in result["configs"].items():
            curves = [curve for curve in c["curves"] if curve]
            if not curves:
                continue
            steps = np.array([s for s, _ in curves[0]])
            returns = np.array([[np.nan if r is None else r for _, r in curve] for curve in curves], dtype=float)
            seen = ~np.isnan(returns).all(axis=0)  # iterations in which some seed finished an episode
            steps, returns = steps[seen], returns[:, seen]
            with warnings.catch_warnings():  # an iteration where only some seeds finished an episode
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(returns, axis=0)
            (line,) = ax.plot(steps, mean, label=f"{name} (mean of {len(curves)})", linewidth=1.6)
            for seed_returns in returns:  # each seed faintly behind the mean; gaps where it finished no episode
                ax.plot(steps, seed_returns, color=line.get_color(), alpha=0.2, linewidth=0.7)
        if result["optimal_return"] is not None:
            ax.axhline(result["optimal_return"], color="k", linestyle="--", linewidth=0.8, label="optimal return")
        ax.set_title(f"{task}: {report['seeds']} seeds per configuration", fontsize=9)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean episode return (training)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- the generic-defaults suite (docs/generic-defaults.md) -------------------------------------------------------

TOY = "gym:omni_sfp.bench.toy_tasks:OmniSfpBench/"
REFERENCE_SHARE = 0.8  # a suite task passes when the mean over seeds reaches this share of its reference figure


@dataclass(frozen=True)
class SuiteTask:
    """One task of the suite: trained with ``cfg/train/GenericPPO.yaml`` for ``steps`` env steps (rounded up to
    whole iterations), compared with ``reference``: the RL Baselines3 Zoo's tuned PPO (benchmark.md: one trained
    agent, deterministic evaluation, +- over its evaluation episodes) or a toy task's optimal return."""

    task: str
    shape: str  # observations -> actions, as the table shows them
    steps: int
    reference: float
    source: str  # where the reference comes from, and its step budget
    overrides: tuple[str, ...] = ()  # train=GenericPPO for an id that has a train file of its own

    def passes(self, mean: float) -> bool:
        """At least :data:`REFERENCE_SHARE` of the reference; for a negative reference (a cost), at most
        1 / REFERENCE_SHARE times its cost."""
        if self.reference < 0:
            return mean >= self.reference / REFERENCE_SHARE
        return mean >= REFERENCE_SHARE * self.reference


GENERIC = ("train=GenericPPO",)  # these ids have a train file of their own; the suite measures the generic one
SUITE = (
    SuiteTask("gym:CartPole-v1", "Box(4) -> Discrete(2)", 100_000, 500.0, "Zoo PPO 500 +- 0, 100k", GENERIC),
    SuiteTask(
        "gym:Acrobot-v1", "Box(6) -> Discrete(3)", 250_000, -73.5, "Zoo PPO -73.5 +- 18.2, 1M (we: 1/4)", GENERIC
    ),
    SuiteTask("gym:Pendulum-v1", "Box(3) -> Box(1)", 100_000, -172.2, "Zoo PPO -172.2 +- 104.2, 100k"),
    SuiteTask("gym:LunarLander-v3", "Box(8) -> Discrete(4)", 1_000_000, 242.1, "Zoo PPO (v2) 242.1 +- 31.8, 1M"),
    SuiteTask("gym:LunarLanderContinuous-v3", "Box(8) -> Box(2)", 1_000_000, 270.9, "Zoo PPO (v2) 270.9 +- 32.1, 1M"),
    SuiteTask("gym:Walker2d-v5", "Box(17) -> Box(6)", 1_000_000, 3478.8, "Zoo PPO (v3) 3478.8 +- 821.7, 1M"),
    SuiteTask(f"{TOY}SidePick-v0", "16x16x3 uint8 -> Discrete(2)", 200_000, 50.0, "optimal 50 (random 25)"),
    SuiteTask(
        f"{TOY}PixelTarget-v0", "12x12x1 uint8 -> MultiDiscrete([3,3])", 100_000, 40.0, "optimal 40 (random 13.3)"
    ),
    SuiteTask(f"{TOY}MatchTheTarget-v0", "Box(6) -> MultiDiscrete([3,3])", 50_000, 40.0, "optimal 40 (random 13.3)"),
)
SUITES = {"generic": SUITE}


def select_suite(name: str, tasks: str | None = None) -> tuple[SuiteTask, ...]:
    """Suite ``name``'s tasks, or those of them named in ``tasks`` (comma-separated).

    :raises ValueError: an unknown suite or task.
    """
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")
    suite = SUITES[name]
    if tasks is None:
        return suite
    wanted = [t.strip() for t in tasks.split(",") if t.strip()]
    known = {t.task: t for t in suite}
    unknown = [t for t in wanted if t not in known]
    if unknown or not wanted:
        raise ValueError(f"not in suite {name!r}: {', '.join(map(repr, unknown)) or repr(tasks)}")
    return tuple(known[t] for t in wanted)


def suite_iterations(task: SuiteTask, overrides: Sequence[str] = ()) -> int:
    """PPO iterations that reach ``task.steps`` env steps with the composed config's envs and rollouts."""
    from omni_sfp.run.compose import load_config, num_envs

    cfg = load_config([f"task={task.task}", *task.overrides, *overrides])
    return math.ceil(task.steps / (num_envs(cfg) * cfg.train.ppo.rollouts))


def run_suite(
    *,
    suite: Sequence[SuiteTask],
    seeds: Iterable[int],
    device: str,
    runs_dir: Path,
    log: Callable[[str], None],
    overrides: Sequence[str] = (),
    workers: int = 1,
) -> dict[str, Any]:
    """Train every suite task once per seed with the generic settings (plus ``overrides``, for trying others):
    the final deterministic return, and whether each seed kept what it learned (its final return is at least
    :data:`omni_sfp.run.progress.KEPT_FRACTION` of its best 10-iteration training mean)."""
    config = select_configs("sfp-fp32")[0]
    seeds = list(seeds)
    results: dict[str, Any] = {}
    jobs = []
    for task in suite:
        iterations = suite_iterations(task, overrides)
        jobs += [(task, iterations, seed) for seed in seeds]
    finished: dict[tuple[str, int], dict[str, Any]] = {}

    def done(task: SuiteTask, seed: int, run: dict[str, Any]) -> None:
        finished[(task.task, seed)] = run
        log(
            f"[suite] {task.task} seed {seed}: final return {run['final_return']}, best training mean "
            f"{run['best_training_mean']}, kept {run['kept']} ({run['training_time_s']:.1f} s)"
        )

    def train(task: SuiteTask, iterations: int, seed: int) -> Any:
        return functools.partial(
            train_once,
            task.task,
            config,
            seed,
            device=device,
            runs_dir=runs_dir,
            iterations=iterations,
            overrides=[*task.overrides, *overrides],
        )

    if workers <= 1:  # one after another, each reported as it ends
        for task, iterations, seed in jobs:
            done(task, seed, train(task, iterations, seed)())
    else:
        with _pool(workers) as pool:
            futures = {pool.submit(train(*job)): (job[0], job[2]) for job in jobs}
            for future in as_completed(futures):
                done(*futures[future], future.result())
    for task in suite:
        runs = [finished[(task.task, seed)] for seed in seeds]
        finals = [r["final_return"] for r in runs if r["final_return"] is not None]
        mean = float(np.mean(finals)) if finals else None
        results[task.task] = {
            "shape": task.shape,
            "steps": runs[0]["env_steps"],
            "reference": task.reference,
            "source": task.source,
            "overrides": [*task.overrides, *overrides],
            "final_returns": [r["final_return"] for r in runs],
            "best_training_means": [r["best_training_mean"] for r in runs],
            "best_checkpoint_returns": [r.get("best_checkpoint_return") for r in runs],
            "kept": [r["kept"] for r in runs],
            "mean": mean,
            "std": float(np.std(finals, ddof=1)) if len(finals) > 1 else None,
            "passes": mean is not None and task.passes(mean),
            "training_time_s": float(np.mean([r["training_time_s"] for r in runs])),
            "curves": [r["curve"] for r in runs],
        }
    return results


def share(final: float, best: float) -> float:
    """``final`` as a share of ``best``, measured by size as :func:`omni_sfp.run.progress.lost` does (a cost 10%
    above the best is 90%)."""
    return 1.0 + (final - best) / abs(best) if best else 1.0


def markdown_suite(report: dict[str, Any]) -> str:
    """The suite's table: task, steps, ours mean +- std over seeds, the reference, and the two checks."""
    meta = report["meta"]
    lines = [
        f"# omni-sfp generic-defaults suite: {report['seeds']} seeds per task, {meta['date']}",
        "",
        f"- machine: {meta['cpu']}, device {meta['device']}; torch {meta['torch']}, skrl {meta['skrl']}",
        f"- command: `{meta['command']}`",
        "",
        f"| task | observations -> actions | env steps | ours: mean +- std | reference | >= {REFERENCE_SHARE:.0%} "
        "| final / best training mean, lowest seed | kept what it learned | s per run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task, r in report["tasks"].items():
        ours = "-" if r["mean"] is None else f"{r['mean']:.1f}" + ("" if r["std"] is None else f" +- {r['std']:.1f}")
        kept = r["kept"]
        played = r.get("best_checkpoint_returns") or [None] * len(kept)
        lost = [
            f"{f:.1f} of {b:.1f}" + ("" if p is None else f", best.pt plays {p:.1f}")
            for f, b, p, k in zip(r["final_returns"], r["best_training_means"], played, kept)
            if k is False
        ]
        kept_cell = "yes" if all(k for k in kept) else ("no: " + ", ".join(lost) if lost else "n/a")
        shares = [share(f, b) for f, b in zip(r["final_returns"], r["best_training_means"]) if None not in (f, b)]
        lowest = f"{min(shares):.0%}" if shares else "-"
        lines.append(
            f"| `{task}` | {r['shape']} | {r['steps']:,} | {ours} | {r['source']} | {'yes' if r['passes'] else 'no'} "
            f"| {lowest} | {kept_cell} | {r['training_time_s']:.0f} |"
        )
    lines += [
        "",
        "Ours: the final deterministic return (mean actions or argmax), the first episode of every env after "
        "training, averaged over the seeds. Per seed: "
        + "; ".join(
            f"{task.rpartition('/')[2] if '/' in task else task}: "
            + ", ".join("-" if f is None else f"{f:.1f}" for f in r["final_returns"])
            for task, r in report["tasks"].items()
        ),
        "",
    ]
    return "\n".join(lines)
