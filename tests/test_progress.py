"""A run that loses what it learned says so (issue 38): the final deterministic return against the best training
mean over 10 iterations, in the summary line and progress.jsonl, pointing to best.pt; ``test=true
test_checkpoint=best`` plays best.pt and says which file it played."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from omni_sfp.ppo.loop import Progress
from omni_sfp.run import progress
from omni_sfp.run.compose import ConfigError, load_config
from omni_sfp.run.progress import Summary, best_training_mean, lost
from omni_sfp.run.runner import Runner
from omni_sfp.train import main

SMALL = ["task=Cartpole", "num_envs=32", "train.models.units=[16]", "train.ppo.rollouts=16"]
SMALL += ["train.ppo.mini_batches=2", "train.ppo.learning_epochs=1"]


def point(iteration: int, mean_return: float | None) -> Progress:
    return Progress(iteration, 16 * iteration, 1.0, mean_return, None, 1.0, 0.0, 0.0)


def test_the_best_training_mean_is_over_ten_consecutive_iterations():
    returns = [None, *range(1, 13), None, 100.0]  # iterations 1-15; 1 and 14 finished no episode
    history = [point(i + 1, r) for i, r in enumerate(returns)]
    # the window of iterations 6-15 holds 5..12 and 100 (iteration 14 finished none): (5 + ... + 12 + 100) / 9
    assert best_training_mean(history) == (pytest.approx((sum(range(5, 13)) + 100) / 9), 6, 15)
    assert best_training_mean(history[:9]) is None  # 9 iterations: too short a run to tell
    assert best_training_mean([point(i, None) for i in range(1, 20)]) is None  # no episode finished


def test_lost_is_measured_by_the_size_of_the_best_mean():
    assert lost(44.9, 50.0) and not lost(45.0, 50.0)
    assert lost(-166.0, -150.0) and not lost(-165.0, -150.0)  # a cost: 10% more than the best is the line


def summary(run_dir: Path | None, final: float | None, returns: list[float | None]) -> Summary:
    history = [point(i + 1, r) for i, r in enumerate(returns)]
    return Summary(1.0, 1.0, 1.0, final, None, len(history), run_dir, history, best_iteration=7)


def test_a_run_that_kept_what_it_learned_says_nothing_more(tmp_path):
    kept = summary(tmp_path, 49.0, [50.0] * 12)
    assert kept.kept is True and "LOST" not in kept.line()
    assert kept.final_record() == {
        "final_return": 49.0,
        "kept_what_it_learned": True,
        "best_training_mean": 50.0,
        "best_training_iterations": [1, 10],
    }
    assert summary(tmp_path, 10.0, [50.0] * 9).kept is None  # too short a history: no verdict
    sparse = summary(tmp_path, 10.0, [None, None, 50.0] * 4)  # an episode ends every third iteration
    assert sparse.kept is False and sparse.best_mean == (50.0, 1, 10)


def test_a_run_that_lost_what_it_learned_names_best_pt_and_how_to_play_it(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"")
    lost_run = summary(tmp_path, 27.9, [30.0, *[49.0] * 10, 28.0])
    assert lost_run.kept is False
    line = lost_run.line()
    assert line.startswith("Training time: 1.0 s | SPS: 1 | SFP cache hits: 100.0% | LOST WHAT IT LEARNED")
    assert "final return 27.90" in line and "best training mean 49.00 (iterations 2-11)" in line
    assert f"best.pt holds iteration 7: test=true checkpoint={tmp_path} test_checkpoint=best" in line
    record = lost_run.final_record()
    assert record["kept_what_it_learned"] is False and record["best_checkpoint_iteration"] == 7
    assert record["best_checkpoint"] == str(tmp_path / "checkpoints" / "best.pt")


def train_with_evaluations(tmp_path, monkeypatch, *returns: float):
    """A real short run whose deterministic evaluations return ``returns`` in turn (the final one, then best.pt's
    where the final fell short); the summary and which models each evaluation played."""
    from omni_sfp.run.outputs import evaluation

    played = []

    def evaluate(agent, env, episodes):
        played.append({k: v.clone() for k, v in agent.policy.state_dict().items()})
        return returns[len(played) - 1]

    monkeypatch.setattr(evaluation, "evaluate_agent", evaluate)
    cfg = load_config([*SMALL, "max_iterations=12", f"runs_dir={tmp_path}", f"progress_file={tmp_path / 'p.jsonl'}"])
    runner = Runner(cfg, disable_progressbar=True)
    result = runner.train()
    return result, played, runner


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_the_runner_says_so_in_the_summary_and_in_progress_jsonl(tmp_path, monkeypatch):
    """The whole path: a real run whose final evaluation comes out far below what its training reached, and whose
    best.pt, played the same way, does better."""
    result, played, runner = train_with_evaluations(tmp_path, monkeypatch, -1.0, 1000.0)
    assert result.final_return == -1.0 and result.best_checkpoint_return == 1000.0 and result.kept is False
    assert "LOST WHAT IT LEARNED" in result.line() and f"iteration {result.best_iteration} and plays 1000.00" in (
        result.line()
    )
    best, last = (
        torch.load(result.run_dir / "checkpoints" / name, weights_only=True)["agent"]["modules"]["policy"]
        for name in ("best.pt", "last.pt")
    )
    assert len(played) == 2 and same(played[0], last) and same(played[1], best)
    assert same(runner.agent.policy.state_dict(), played[0])  # the final models again, for the outputs after it
    for path in (result.run_dir / "progress.jsonl", tmp_path / "p.jsonl"):
        *iterations, last = (json.loads(line) for line in path.read_text().splitlines())
        assert len(iterations) == 12 and last["kept_what_it_learned"] is False and last["final_return"] == -1.0
        assert Path(last["best_checkpoint"]).is_file() and last["best_checkpoint_iteration"] == result.best_iteration
        assert last["best_checkpoint_return"] == 1000.0
    assert progress.best_training_mean(result.history)[0] == last["best_training_mean"]


def test_a_final_return_below_the_training_best_that_best_pt_does_not_beat_is_no_loss(tmp_path, monkeypatch):
    """A noisy return's best 10-iteration window sits above the level the policy holds (LunarLander-v3: a best
    window of 269 on a plateau near 240): where best.pt plays no better than the final policy, nothing was lost."""
    result, played, _ = train_with_evaluations(tmp_path, monkeypatch, -1.0, -1.05)
    assert result.below_training and result.kept is True and "LOST" not in result.line() and len(played) == 2


def test_test_true_plays_best_pt_or_last_pt_and_says_which(tmp_path, capsys):
    assert main([*SMALL, "max_iterations=3", f"runs_dir={tmp_path}"]) == 0
    (run,) = tmp_path.glob("Cartpole/*")
    capsys.readouterr()
    play = ["task=Cartpole", "num_envs=4", "train.models.units=[16]", "test=true", f"checkpoint={run}"]
    assert main([*play, "test_checkpoint=best"]) == 0
    assert f"checkpoint {run / 'checkpoints' / 'best.pt'} (best.pt: iteration " in capsys.readouterr().out
    assert main(play) == 0
    assert f"checkpoint {run / 'checkpoints' / 'last.pt'} (last.pt: iteration 3)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["test_checkpoint=best"], "picks the checkpoint test=true plays"),
        (["test=true", "checkpoint=x.pt", "test_checkpoint=best"], "is no folder"),
    ],
)
def test_test_checkpoint_outside_its_use_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(["task=Cartpole", *overrides])


def test_a_lost_run_with_an_unannealed_kl_bound_above_the_base_is_told_how_to_hold_the_rate(tmp_path):
    """Isaac Lab's skrl configs keep KLAdaptiveLR's default bound 1e-2 without anneal (upstream settings win): a run
    that lost what it learned under it gets the remedy; one under the base's annealed bound does not."""
    from omni_sfp.run.runner import kl_rate_bound

    returns = [30.0, *[49.0] * 10, 28.0]
    upstream_like = summary(tmp_path, 27.9, returns)
    upstream_like.rate_bound = kl_rate_bound(
        load_config(["task=Cartpole", "train.ppo.max_learning_rate=1e-2", "train.ppo.learning_rate_anneal=false"])
    )
    assert upstream_like.rate_bound == 1e-2
    assert upstream_like.line().endswith(
        "the KL-adaptive rate climbs to its bound 0.01 once the policy is sure of itself (docs/generic-defaults.md): "
        "train.ppo.max_learning_rate=0.001 train.ppo.learning_rate_anneal=true hold it"
    )
    for cfg in (["task=Cartpole"], ["task=Cartpole", "train.ppo.learning_rate_schedule=fixed"]):
        assert kl_rate_bound(load_config(cfg)) is None  # annealed, or no KL-adaptive rate
    base = summary(tmp_path, 27.9, returns)
    assert "LOST WHAT IT LEARNED" in base.line() and "climbs to its bound" not in base.line()
