"""The runner's outputs beyond checkpoints, end to end through ``python -m omni_sfp.train``: ``export=true``,
``wandb_activate=true`` (WANDB_MODE=offline) and ``test=true video=true``, plus their one-line refusals."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_export import rounding_bound
from test_video import CART, POLE, mask

from omni_sfp.run.compose import load_config
from omni_sfp.run.outputs.base import RunOutput, outputs_for
from omni_sfp.run.outputs.export import deployed_policy
from omni_sfp.run.outputs.video import read_video
from omni_sfp.run.runner import Runner
from omni_sfp.train import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = [
    "task=Cartpole",
    "num_envs=64",
    "train.models.units=[32,32]",
    "train.ppo.rollouts=8",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=2",
]


def cli(*args, cwd, **env):
    return subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short run with export=true and W&B offline; its run folder."""
    pytest.importorskip("onnxruntime", reason="pip install omni-sfp[export]")
    pytest.importorskip("wandb", reason="pip install omni-sfp[wandb]")
    cwd = tmp_path_factory.mktemp("outputs")
    result = cli(
        *SMALL,
        "max_iterations=3",
        "export=true",
        "wandb_activate=true",
        "wandb_project=sfp-tests",
        "wandb_group=ci",
        cwd=cwd,
        WANDB_MODE="offline",
        WANDB_SILENT="true",
    )
    assert result.returncode == 0, result.stderr
    (run,) = (cwd / "runs" / "Cartpole").iterdir()
    assert f"[omni_sfp] exported policy: {run.relative_to(cwd) / 'exported' / 'policy.pt'}" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("Training time:")  # still the last line
    return run


@pytest.mark.slow  # subprocess CLI runs
def test_export_true_gives_the_checkpoints_deterministic_actions(trained):
    import onnxruntime

    cfg = load_config([*SMALL, "test=true", f"checkpoint={trained}"])
    runner = Runner(cfg, disable_progressbar=True)
    runner.load_state_dict(runner._resume_state, source=runner.resume_from, models_only=True)  # what test=true plays
    agent = runner.agent
    agent.enable_models_training_mode(False)
    observations = torch.randn(50, 4, generator=torch.Generator().manual_seed(0)) * torch.tensor([1.5, 2.0, 0.4, 2.0])
    with torch.no_grad():
        _, outputs = agent.act(observations, None, timestep=0, timesteps=0)
    expected = outputs["mean_actions"].clamp(-1.0, 1.0)  # Cartpole clips its actions to [-1, 1]
    bound = rounding_bound(
        deployed_policy(agent.policy, agent.checkpoint_modules["observation_preprocessor"], runner.env.action_space),
        observations,
    )
    scripted = torch.jit.load(str(trained / "exported" / "policy.pt"))
    session = onnxruntime.InferenceSession(
        str(trained / "exported" / "policy.onnx"), providers=["CPUExecutionProvider"]
    )
    with torch.no_grad():
        from_torchscript = scripted(observations)
    from_onnx = torch.from_numpy(session.run(["actions"], {"observations": observations.numpy()})[0])
    for actions in (from_torchscript, from_onnx):
        assert ((actions - expected).abs() <= bound).all()


@pytest.mark.slow  # subprocess CLI runs
def test_wandb_offline_run_mirrors_the_tensorboard_scalars_and_holds_the_config(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_wandb_logging import read_offline_run

    fields, config, history = read_offline_run(trained)
    assert (fields["project"], fields["group"], fields["name"]) == ("sfp-tests", "ci", trained.name)
    assert config["task"]["name"] == "Cartpole" and config["train"]["ppo"]["rollouts"] == 8
    assert config["wandb_activate"] is True and config["seed"] == 42
    accumulator = EventAccumulator(str(trained), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    assert "Loss / Policy loss" in tags and "SFP / Cache hit rate (shareable calls)" in tags
    for tag in tags:
        in_tensorboard = [(event.step, pytest.approx(event.value, rel=1e-6)) for event in accumulator.Scalars(tag)]
        in_wandb = [(row["_step"], row[tag]) for row in history if tag in row]
        assert in_wandb == in_tensorboard, tag


@pytest.mark.slow  # subprocess CLI runs
def test_test_true_video_true_records_the_cartpole_being_played(trained):
    result = cli(*SMALL, "test=true", f"checkpoint={trained}", "video=true", "video_length=40", cwd=trained.parent)
    assert result.returncode == 0, result.stderr
    (clip,) = (trained / "videos" / "play").iterdir()
    assert f"[omni_sfp] video: {clip}" in result.stdout
    frames = read_video(clip)
    assert len(frames) == 41  # the first state and one frame per step
    for frame in frames:
        assert mask(frame, POLE).sum() > 30 and mask(frame, CART).sum() > 200  # not blank: the cart-pole is drawn
    changed = [not np.array_equal(a, b) for a, b in zip(frames, frames[1:])]
    # it moves: near a turn the cart-pole can move less than a pixel in a step, but a stalled clip would repeat
    # a frame for longer than that
    still = max((len(list(run)) for moved, run in itertools.groupby(changed) if not moved), default=0)
    assert sum(changed) > len(changed) / 2 and still <= 3


@pytest.mark.parametrize(
    "args, expected",
    [
        (["task=LQR60x8", "video=true"], "video=true: task LQR60x8 draws nothing"),
        (["video_interval=0"], "video_interval=0: must be >= 1"),
        (["export=maybe"], "export='maybe': expected bool"),
        (["wandb_activate=true", "wandb_project="], "wandb_project=''"),
    ],
)
def test_bad_output_settings_are_one_line(args, expected, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("omni_sfp.train: error:") and expected in err


# -- the outputs' one interface (omni_sfp/run/outputs/base.py) --------------------------------------------------
class Recording(RunOutput):
    """An output that notes each hook the runner calls, in order."""

    order = 99

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def start(self, run) -> None:
        self.calls.append(("start", run.iteration))

    def after_iteration(self, run, progress) -> None:
        self.calls.append(("after_iteration", progress.iteration))

    def end(self, run, summary) -> None:
        self.calls.append(("end", None if summary is None else summary.final_return is not None))

    def close(self) -> None:
        self.calls.append(("close", None))


def kinds(overrides: list[str]) -> list[str]:
    return [type(o).__name__ for o in outputs_for(load_config([*SMALL, *overrides]), main=True)]


def test_the_config_picks_the_outputs_and_their_order():
    assert kinds([]) == ["FinalEvaluation", "LearningCurve"]
    assert kinds(["video=true", "export=true"]) == ["FinalEvaluation", "LearningCurve", "Video", "Export"]
    assert [type(o).__name__ for o in outputs_for(load_config(SMALL), main=False)] == []  # ranks > 0


def test_every_output_is_called_at_the_same_points_after_the_final_evaluation(tmp_path):
    runner = Runner(load_config([*SMALL, "max_iterations=3", f"runs_dir={tmp_path}"]), disable_progressbar=True)
    calls: list = []
    runner.outputs.append(Recording(calls))
    summary = runner.train()
    assert calls == [
        ("start", 0),
        ("after_iteration", 1),
        ("after_iteration", 2),
        ("after_iteration", 3),
        ("end", True),  # the final evaluation (order 10) has filled in the return before this output's end
        ("close", None),
    ]
    assert summary.final_return is not None and (summary.run_dir / "learning_curve.png").is_file()


def test_outputs_are_closed_when_training_raises(tmp_path, monkeypatch):
    runner = Runner(load_config([*SMALL, "max_iterations=3", f"runs_dir={tmp_path}"]), disable_progressbar=True)
    calls: list = []
    runner.outputs.append(Recording(calls))

    def broken() -> None:
        raise RuntimeError("the simulator died")

    monkeypatch.setattr(runner.learner, "learn", broken)
    with pytest.raises(RuntimeError, match="the simulator died"):
        runner.train()
    assert calls == [("start", 0), ("close", None)]
