"""The quality mode: its rows (omni-sfp, rl_games, plain skrl), what counts as solved, and its CLI."""

from __future__ import annotations

import math

import pytest

from omni_sfp.bench.__main__ import main
from omni_sfp.bench.quality import (
    CONFIGS,
    LQR_SOLVED_RATIO,
    TOY,
    markdown,
    plot,
    rlgames_params,
    run_quality,
    select_configs,
    solved,
)
from omni_sfp.run.compose import load_config


def test_rlgames_params_map_the_config_one_to_one():
    cfg = load_config(
        [
            "task=Cartpole",
            "train.ppo.mini_batches=2",
            "train.ppo.value_loss_scale=1.5",
            "train.ppo.value_clip=0.2",  # Cartpole trains without one; the mapping of a clip is what is checked
            "train.models.units=[32,32]",
            "train.ppo.learning_rate=5e-4",
            "max_iterations=7",
        ]
    )
    c = rlgames_params(cfg, device="cpu", train_dir="/tmp/x", threads=1)["params"]["config"]
    p = cfg.train.ppo
    assert c["minibatch_size"] == 512 * p.rollouts // 2 and c["horizon_length"] == p.rollouts
    assert c["critic_coef"] == 3.0  # rl_games halves its critic loss
    assert c["mini_epochs"] == p.learning_epochs and c["max_epochs"] == 7
    assert c["learning_rate"] == 5e-4 and c["lr_schedule"] == "adaptive" and c["kl_threshold"] == p.desired_kl
    assert c["reward_shaper"]["scale_value"] == p.rewards_scale and c["gamma"] == p.discount_factor
    assert c["tau"] == p.gae_lambda and c["e_clip"] == p.ratio_clip and c["clip_value"] is True
    assert c["value_bootstrap"] is True and c["normalize_input"] is True and c["normalize_value"] is True
    network = rlgames_params(cfg, device="cpu", train_dir="/tmp/x", threads=1)["params"]["network"]
    assert network["mlp"]["units"] == [32, 32] and network["separate"] is False
    fixed = ["task=Cartpole", "train.ppo.learning_rate_schedule=fixed"]
    for anneal, schedule in (("false", None), ("true", "linear")):  # rl_games' linear schedule is our anneal
        cfg = load_config([*fixed, f"train.ppo.learning_rate_anneal={anneal}"])
        assert (
            rlgames_params(cfg, device="cpu", train_dir="/tmp/x", threads=1)["params"]["config"]["lr_schedule"]
            == schedule
        )


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.ppo.value_clip=0.5", "value_clip 0.5 must equal ratio_clip"),
        ("train.ppo.kl_threshold=0.05", "no KL early stop"),
    ],
)
def test_rlgames_params_refuse_what_rl_games_cannot_express(override, message):
    with pytest.raises(ValueError, match=message):
        rlgames_params(load_config(["task=Cartpole", override]), device="cpu", train_dir="/tmp/x", threads=1)


def test_solved():
    assert solved(480.0, None, "Cartpole") and not solved(474.9, None, "Cartpole")
    optimal = -10.0
    assert solved(LQR_SOLVED_RATIO * optimal, optimal, "LQR60x8")
    assert not solved(LQR_SOLVED_RATIO * optimal - 0.01, optimal, "LQR60x8")
    assert solved(None, None, "Cartpole") is False and solved(1.0, None, "gym:Pendulum-v1") is None
    assert solved(2410.0, None, "gym:Hopper-v5") and not solved(2409.9, None, "gym:Hopper-v5")
    assert solved(450.0, None, "CartpolePositions") and not solved(449.9, None, "CartpolePositions")


def test_the_feed_forward_row_is_the_recurrent_network_without_its_memory():
    from omni_sfp.bench.quality import feed_forward_overrides

    assert feed_forward_overrides("CartpolePositions") == [
        "train.models.network=null",
        "train.models.units=[64,64]",
        "train.models.activation=elu",
    ]
    with pytest.raises(ValueError, match="task 'Cartpole' trains no recurrent network"):
        feed_forward_overrides("Cartpole")


def test_select_configs():
    assert select_configs(None) == tuple(c for c in CONFIGS if c.key != "mlp-fp32")  # asked for by name only
    assert [c.key for c in select_configs("mlp-fp32")] == ["mlp-fp32"]
    assert [c.key for c in select_configs("skrl, sfp-fp32")] == ["sfp-fp32", "skrl"]
    with pytest.raises(ValueError, match="unknown quality configuration 'nope'"):
        select_configs("sfp-fp32,nope")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["quality", "--configs", "nope"], "unknown quality configuration 'nope'"),
        (["quality", "--tasks", "CartpolePositions"], "quality rows rl_games, skrl train an MLP"),
        (["quality", "--tasks", "Cartpole", "--configs", "mlp-fp32"], "task 'Cartpole' trains no recurrent network"),
        (["table", "--configs", "skrl"], "unrecognized arguments: --configs skrl"),
        (["table", "--jobs", "2"], "unrecognized arguments: --jobs 2"),
        (["quality", "--set", "train.ppo.learning_rate=-1"], "learning_rate"),
    ],
)
def test_bad_quality_arguments_print_one_line_and_exit_2(args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("omni_sfp.bench: error: ") and expected in err and err.count("\n") == 1


def test_every_trainer_row_trains_and_is_evaluated(tmp_path):
    """One tiny run per trainer on the same task and config: each gives a deterministic final return and a
    learning curve with one point per update, measured by the same episode recorder."""
    overrides = [
        "num_envs=8",
        "task.env.max_episode_length=20",
        "train.models.units=[16]",
        "train.ppo.mini_batches=2",
        "train.ppo.rollouts=8",
    ]
    configs = select_configs("sfp-fp32,rl_games,skrl")
    result = run_quality(
        tasks=["Cartpole"],
        seeds=[3],
        device="cpu",
        runs_dir=tmp_path,
        iterations=3,
        log=lambda line: None,
        configs=configs,
        overrides=overrides,
    )["Cartpole"]
    assert list(result["configs"]) == [c.name for c in configs]
    for name, row in result["configs"].items():
        (final,) = row["final_returns"]
        assert math.isfinite(final) and 0 < final <= 20, name  # reward <= 1 per step, 20 steps
        assert row["solved"] == 0 and row["runs"] == 1
        (curve,) = row["curves"]
        assert [steps for steps, _ in curve] == [8 * 8, 2 * 8 * 8, 3 * 8 * 8], name
    assert result["overrides"] == overrides


def report_with(finals: dict[str, list[float]], optimal: float | None, task: str) -> dict:
    curves = [[(100, 1.0), (200, None), (300, 3.0)]]
    configs = {
        name: {
            "final_returns": f,
            "mean": sum(f) / len(f),
            "std": 0.0,
            "runs": len(f),
            "solved": sum(bool(solved(x, optimal, task)) for x in f),
            "training_time_s": 1.0,
            "curves": curves * len(f),
        }
        for name, f in finals.items()
    }
    meta = {"date": "d", "cpu": "c", "device": "cpu", "torch": "t", "skrl": "s", "rl_games": "r", "command": "x"}
    return {"meta": meta, "seeds": 3, "tasks": {task: {"optimal_return": optimal, "configs": configs, "tests": []}}}


def test_markdown_reports_the_fraction_solved_and_the_cost_ratio(tmp_path):
    text = markdown(report_with({"single pass, fp32": [480.0, 490.0, 300.0]}, None, "Cartpole"))
    assert "| single pass, fp32 | 423.33 |" in text and "| 2/3 |" in text and "return >= 475" in text
    text = markdown(report_with({"rl_games 1.6.5, fp32": [-11.0, -12.0, -13.0]}, -10.0, "LQR60x8"))
    assert "(1.200x optimal cost)" in text and "| 2/3 |" in text
    path = tmp_path / "q.png"
    plot(report_with({"a": [1.0, 2.0]}, None, "Cartpole"), path)
    assert path.stat().st_size > 0


# -- the generic-defaults suite --------------------------------------------------------------------------------


def test_the_suite_covers_the_shapes_issue_38_asks_for_with_three_seeds_by_default():
    from omni_sfp.bench.quality import SUITE

    shapes = " ".join(t.shape for t in SUITE)
    assert "-> Discrete" in shapes and "-> Box" in shapes and "MultiDiscrete" in shapes
    assert sum("uint8" in t.shape for t in SUITE) >= 2  # pixel tasks
    assert any("LunarLander-v3" in t.task for t in SUITE) and any("LunarLanderContinuous" in t.task for t in SUITE)
    # ids that have a train file of their own are measured with the generic one
    generic = load_config(["task=gym:Pendulum-v1"]).train
    for task in SUITE:
        assert load_config([f"task={task.task}", *task.overrides]).train == generic, task.task


def test_a_suite_task_passes_at_80_percent_of_its_reference_and_a_cost_at_1_25x():
    from omni_sfp.bench.quality import SuiteTask

    reward = SuiteTask("gym:LunarLander-v3", "", 1, 250.0, "")
    assert reward.passes(200.0) and not reward.passes(199.9)
    cost = SuiteTask("gym:Pendulum-v1", "", 1, -172.0, "")
    assert cost.passes(-215.0) and not cost.passes(-215.1)


def test_suite_iterations_reach_the_step_budget_with_whole_iterations():
    from omni_sfp.bench.quality import SuiteTask, suite_iterations

    task = SuiteTask("gym:Pendulum-v1", "", 100_000, -172.0, "")
    cfg = load_config(["task=gym:Pendulum-v1", "train.ppo.rollouts=32"])
    iterations = suite_iterations(task, ["train.ppo.rollouts=32"])
    assert iterations == math.ceil(100_000 / (cfg.task.env.num_envs * 32))


def test_select_suite_names_an_unknown_suite_or_task():
    from omni_sfp.bench.quality import SUITE, select_suite

    assert select_suite("generic") == SUITE
    assert [t.task for t in select_suite("generic", "gym:Pendulum-v1")] == ["gym:Pendulum-v1"]
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        select_suite("nope")
    with pytest.raises(ValueError, match="not in suite 'generic': 'gym:Hopper-v5'"):
        select_suite("generic", "gym:Hopper-v5")


def test_the_suite_trains_each_seed_and_reports_whether_it_kept_what_it_learned(tmp_path):
    from omni_sfp.bench.quality import SuiteTask, markdown_suite, run_suite

    task = SuiteTask(f"{TOY}MatchTheTarget-v0", "Box(6) -> MultiDiscrete([3,3])", 2 * 16 * 16, 40.0, "optimal 40")
    results = run_suite(
        suite=[task],
        seeds=[0, 1],
        device="cpu",
        runs_dir=tmp_path,
        log=lambda line: None,
        overrides=["num_envs=16", "train.models.units=[16]", "train.ppo.mini_batches=2"],
    )
    row = results[task.task]
    assert row["steps"] == 2 * 16 * 16 and len(row["final_returns"]) == 2
    assert row["passes"] == (row["mean"] >= 0.8 * 40) and row["mean"] == sum(row["final_returns"]) / 2
    assert row["kept"] == [None, None]  # two iterations: too short a history to tell
    meta = {"date": "d", "cpu": "c", "device": "cpu", "torch": "t", "skrl": "s", "command": "x"}
    text = markdown_suite({"meta": meta, "seeds": 2, "tasks": results})
    assert (
        f"| `{task.task}` | Box(6) -> MultiDiscrete([3,3]) | 512 | " in text
        and "| optimal 40 | " in text
        and " | n/a | " in text
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["quality", "--suite", "generic", "--tasks", "gym:Hopper-v5"], "not in suite 'generic'"),
        (["table", "--suite", "generic"], "unrecognized arguments: --suite generic"),
        (["quality", "--suite", "generic", "--iterations", "3"], "--suite trains the generic settings"),
    ],
)
def test_bad_suite_arguments_print_one_line_and_exit_2(args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("omni_sfp.bench: error: ") and expected in err and err.count("\n") == 1
