"""cfg/train/GenericPPO.yaml, the settings of every task without a train file of its own (issue 38).

The mechanism it guards against, reproduced in one update: a Categorical policy that is sure of itself has a KL
of exactly 0 between any two updates (its log-probabilities round to 0), so skrl's KL-adaptive rule reads every
epoch as a step too small and raises the rate by 1.5x, 25x over 8 epochs, up to its bound. With the old generic
bound (1e-2, no anneal) one update then ran Adam at 7.7e-3 on the shared trunk, and the image side-picking task
fell from 49.6 of 50 to random play (docs/generic-defaults.md). The generic settings hold the rate under the
base's annealed 1e-3 bound."""

from __future__ import annotations

import pytest
import torch

from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import Runner

SIDE_PICK = "gym:omni_sfp.bench.toy_tasks:OmniSfpBench/SidePick-v0"
SMALL = ["+task.env.size=8", "num_envs=8", "train.ppo.rollouts=8", "train.ppo.mini_batches=2", "max_iterations=1"]
OLD_GENERIC = [  # GenericPPO.yaml until issue 38
    "train.ppo.rollouts=16",
    "train.ppo.learning_epochs=8",
    "train.ppo.max_learning_rate=1e-2",
    "train.ppo.learning_rate_anneal=false",
    "train.ppo.value_clip=0.2",
]


def update_of_a_sure_policy(tmp_path, *overrides: str) -> dict[str, float]:
    """One rollout and update of the side-picking task's CNN policy, made sure of action 0 on every image."""
    cfg = load_config([f"task={SIDE_PICK}", *overrides, *SMALL, f"runs_dir={tmp_path}"])
    runner = Runner(cfg, disable_progressbar=True)
    head = runner.models["policy"].policy_head.linear
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([30.0, -30.0]))  # p(action 1) = e^-60: log p(action 0) rounds to 0
    runner.train()
    return runner.agent.last_losses


def test_a_sure_categorical_policy_has_zero_kl_and_the_old_generic_rate_climbs_25x_in_one_update(tmp_path):
    losses = update_of_a_sure_policy(tmp_path, *OLD_GENERIC)
    assert losses["kl"] == 0.0
    assert losses["learning_rate"] == pytest.approx(3e-4 * 1.5**8)  # 7.7e-3: every epoch raised it, under 1e-2


def test_the_generic_settings_hold_the_rate_under_the_annealed_bound(tmp_path):
    cfg = load_config([f"task={SIDE_PICK}"])
    assert cfg.train.ppo.max_learning_rate <= 1e-3 and cfg.train.ppo.learning_rate_anneal
    losses = update_of_a_sure_policy(tmp_path)
    assert losses["kl"] == 0.0 and losses["learning_rate"] <= 1e-3


@pytest.mark.slow
def test_the_side_picking_task_learns_and_keeps_it_with_the_generic_settings(tmp_path):
    """Issue 38's task on 8 x 8 images (the suite trains 16 x 16, 5 seeds >= 49.7 of 50: docs/generic-defaults.md).
    With the old generic settings this task reached 49.6 and ended at random play."""
    cfg = load_config([f"task={SIDE_PICK}", "+task.env.size=8", "seed=0", "max_iterations=40", f"runs_dir={tmp_path}"])
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.final_return >= 45.0 and summary.kept, (summary.final_return, summary.best_mean)
