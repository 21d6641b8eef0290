"""The iteration loop (omni_sfp.ppo.loop.Learner) and the progress output around it (progress.ProgressOutput)."""

from __future__ import annotations

import json

import pytest
import torch

from omni_sfp.envs.registry import make_env
from omni_sfp.ppo.loop import Learner, Progress
from omni_sfp.run.compose import load_config
from omni_sfp.run.progress import ProgressOutput
from omni_sfp.run.runner import build_agent, build_models

SMALL = [
    "task=Cartpole",
    "num_envs=8",
    "train.models.units=[16,16]",
    "train.ppo.rollouts=4",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=1",
    "task.env.max_episode_length=6",
]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build():
    cfg = load_config(SMALL)
    env = make_env("Cartpole", num_envs=8, device=torch.device("cpu"), seed=0, task_cfg={"max_episode_length": 6})
    agent = build_agent(cfg, env, build_models(cfg, env, torch.device("cpu")), torch.device("cpu"), run_dir=None)
    return env, agent


def test_each_iteration_is_rollout_update_log_checkpoint_tune_in_that_order_and_a_stop_ends_it_with_a_final_checkpoint():
    env, agent = build()
    events = []
    update = agent.update
    agent.update = lambda **kwargs: events.append(("update", agent._rollout)) or update(**kwargs)
    learner = Learner(env, agent, iterations=5)
    learner.log = lambda progress, losses: events.append(("log", progress.iteration, "policy_loss" in losses))

    def stop_in_iteration_2(progress, final):
        events.append(("checkpoint", progress.iteration, final))
        learner.stop.requested = progress.iteration == 2 or learner.stop.requested

    learner.checkpoint = stop_in_iteration_2
    learner.tune = lambda progress: events.append(("tune", progress.iteration))
    learner.learn()
    assert events == [
        ("update", 4),
        ("log", 1, True),
        ("checkpoint", 1, False),
        ("tune", 1),
        ("update", 8),
        ("log", 2, True),
        ("checkpoint", 2, False),
        ("tune", 2),
        ("update", 12),
        ("log", 3, True),
        ("checkpoint", 3, True),
    ]  # stop seen after iteration 2's
    assert learner.iteration == 3 and learner.timestep == 12


def test_the_loop_runs_to_its_last_iteration_and_counts_every_shareable_call():
    env, agent = build()
    history = []
    learner = Learner(
        env,
        agent,
        iterations=3,
        log=lambda progress, losses: history.append(progress),
        checkpoint=lambda progress, final: history.append(final),
    )
    learner.learn()
    progress = [p for p in history if isinstance(p, Progress)]
    assert [p.iteration for p in progress] == [1, 2, 3] and [p.timestep for p in progress] == [4, 8, 12]
    assert [f for f in history if isinstance(f, bool)] == [False, False, True]
    assert progress[-1].sfp_hit_rate == 1.0 and agent.shareable_calls == agent.sfp_stats.hits > 0
    assert progress[-1].rollout_s > 0 and progress[-1].update_s > 0


def test_off_a_terminal_one_compact_line_every_n_iterations_and_at_the_last(tmp_path, capsys):
    _, agent = build()
    output = ProgressOutput(
        [tmp_path / "progress.jsonl"],
        agent,
        iterations=5,
        start_iteration=0,
        console="lines",
        cache_in_use=True,
        every=2,
    )
    for iteration in range(1, 6):
        output.write(
            Progress(
                iteration=iteration,
                timestep=4 * iteration,
                sps=1000.0,
                mean_return=10.0 * iteration,
                mean_length=5.0,
                sfp_hit_rate=1.0,
                rollout_s=0.1,
                update_s=0.1,
            ),
            {},
        )
    output.close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines] == [
        "[omni_sfp] iteration 2/5",
        "[omni_sfp] iteration 4/5",
        "[omni_sfp] iteration 5/5",
    ]
    assert lines[1].split(" | ")[1:-1] == ["env steps 128", "SPS 1000", "return 40.0", "cache hits 100.0%"]
    assert lines[1].split(" | ")[-1].startswith("ETA ") and lines[-1].endswith("ETA 0 s")
    written = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [entry["iteration"] for entry in written] == [1, 2, 3, 4, 5]
