"""The omni-sfp rows: the product's own code path (validated config -> build_models -> build_agent -> Learner)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig

from omni_sfp.bench.configs import Row, Work, kernels_info
from omni_sfp.compute.cpu_choices import apply_config
from omni_sfp.compute.device import resolve_device
from omni_sfp.ppo.loop import Learner
from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import build_agent, build_models


def _flag(value: bool) -> str:
    return "true" if value else "false"


def omni_config(work: Work, row: Row, *, device: str, seed: int) -> DictConfig:
    """The training config of a row as ``python -m omni_sfp.train`` overrides, validated like any user's. The
    thread count is the benchmark's (every row runs with the same); the other CPU choices are ``auto``."""
    return load_config(
        [
            f"task={work.task}",
            f"num_envs={work.num_envs}",
            f"device={device}",
            f"seed={seed}",
            f"max_iterations={work.total_updates}",
            f"train.kernels.threads={torch.get_num_threads()}",
            f"train.models.units=[{','.join(map(str, work.units))}]",
            f"train.models.activation={work.activation}",
            f"train.models.compile={_flag(row.compile)}",
            f"train.capture={_flag(row.capture)}",
            f"train.mixed_precision={_flag(row.mixed_precision)}",
            "train.sfp.enabled=true",
            f"train.sfp.cache_check={'auto' if row.single_forward_pass else 'off'}",
            f"train.ppo.rollouts={work.horizon}",
            f"train.ppo.learning_epochs={work.epochs}",
            f"train.ppo.mini_batches={work.mini_batches}",
            f"train.ppo.learning_rate={work.learning_rate}",
            "train.ppo.learning_rate_schedule=fixed",
            "train.ppo.learning_rate_anneal=false",  # as the rl_games rows' identity scheduler
            "train.ppo.kl_threshold=0",
            f"train.ppo.discount_factor={work.discount_factor}",
            f"train.ppo.gae_lambda={work.gae_lambda}",
            f"train.ppo.ratio_clip={work.ratio_clip}",
            f"train.ppo.value_clip={work.value_clip}",
            f"train.ppo.grad_norm_clip={work.grad_norm_clip}",
            "train.ppo.entropy_loss_scale=0.0",
            "train.ppo.bounds_loss_scale=0.0",  # as the rl_games rows (bounds_loss_coef 0) and skrl's PPO: the same work
            "train.ppo.value_loss_scale=1.0",
            f"train.ppo.rewards_scale={work.rewards_scale}",
            f"train.ppo.time_limit_bootstrap={_flag(row.time_limit_bootstrap)}",
            "train.ppo.observation_normalization=true",
            "train.ppo.value_normalization=true",
        ]
    )


def build_omni(env, work: Work, row: Row, *, device: str, seed: int):
    """The agent of a row, as the Runner builds it (its CPU choices applied); returns it with the choices."""
    cfg = omni_config(work, row, device=device, seed=seed)
    torch_device = resolve_device(cfg.device)
    choices = apply_config(cfg, torch_device)  # as the Runner does: measured once per CPU kind, then cached
    models = build_models(cfg, env, torch_device)
    agent = build_agent(cfg, env, models, torch_device, run_dir=None)
    if row.capture:  # as the Runner does with train.capture=true
        agent.set_capture("graph" if torch_device.type == "cuda" else "compile")
    return agent, choices


def run_omni(env, work: Work, row: Row, *, device: str, seed: int, on_update: Callable[[], None]) -> dict[str, Any]:
    """Train ``work.total_updates`` updates with omni-sfp on ``env``; ``on_update`` after each."""
    agent, choices = build_omni(env, work, row, device=device, seed=seed)
    # a captured row runs one iteration before the clock: its act pair is compiled in its second rollout (the first
    # act of a process is eager), and that compile belongs with the step's, before the timed window
    extra = 1 if row.capture else 0

    def log(progress, losses) -> None:
        if progress.iteration > extra:
            on_update()

    Learner(env, agent, iterations=work.total_updates + extra, log=log).learn()
    # fused Adam: train.ppo.fused_optimizer, where present
    info = {
        "fused_adam": bool(agent.optimizer.defaults.get("fused")),
        "torch_compile": row.compile,
        "capture": agent.capture,
        "kernels": kernels_info(choices.as_dict(), choices.sources),
    }
    if row.single_forward_pass:
        info["sfp_hit_rate"] = agent.sfp_share_rate
    return info
