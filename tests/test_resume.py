"""Resume without loss: an interrupted run continued from its checkpoint is the uninterrupted run, bitwise.

The runs are tiny (16 Cartpole envs, 20-step episodes so that episodes finish and reset from the task's
generator inside the window, [16,16] trunk) and run in this process on one thread. They keep the defaults
that carry state across iterations: observation and value normalisation, the KL-adaptive learning rate and
its annealed bound, time-limit bootstrapping, Adam, the cache's counters, best return.
"""

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from omni_sfp.run import checkpoint as ckpt
from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import Runner
from omni_sfp.train import main

pytestmark = pytest.mark.slow  # training runs (module-scoped), a subprocess CLI run and signals

ROOT = Path(__file__).resolve().parent.parent
SMALL = [
    "task=Cartpole",
    "num_envs=16",
    "train.models.units=[16,16]",
    "train.ppo.rollouts=8",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=2",
    "task.env.max_episode_length=20",
]
DETERMINISTIC = ("iteration", "timestep", "mean_return", "mean_length", "sfp_hit_rate", "skipped_updates")
TAGS = (
    "Loss / Policy loss",
    "Loss / Value loss",
    "Learning / Learning rate",
    "Reward / Episode return (mean)",
    "SFP / Cache hit rate (shareable calls)",
    "Policy / Standard deviation",
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: threads only contend here
    yield
    torch.set_num_threads(threads)


def train(tmp: Path, *overrides: str) -> tuple[Runner, Path]:
    runner = Runner(load_config([*SMALL, f"runs_dir={tmp}", *overrides]), disable_progressbar=True)
    summary = runner.train()
    return runner, summary.run_dir


def train_until_sigterm(tmp: Path, last_iteration: int, *overrides: str) -> Path:
    """A run that a SIGTERM stops at the end of ``last_iteration`` (the signal arrives while it runs), with
    the same ``max_iterations`` as the run it is compared with: the anneal's schedule is the same."""
    runner = Runner(load_config([*SMALL, f"runs_dir={tmp}", *overrides]), disable_progressbar=True)
    log = runner.learner.log

    def log_then_signal(progress, losses):
        log(progress, losses)
        if progress.iteration == last_iteration - 1:
            os.kill(os.getpid(), signal.SIGTERM)  # after this iteration's stop check: the next one is the last

    runner.learner.log = log_then_signal
    summary = runner.train()
    assert summary.interrupted == "SIGTERM" and summary.iterations == last_iteration
    return summary.run_dir


def progress(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    return [{k: line[k] for k in DETERMINISTIC} for line in lines if "iteration" in line]  # not the end's line


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in TAGS}


def assert_bitwise_equal(a, b, path="state"):
    assert type(a) is type(b), path
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_bitwise_equal(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_bitwise_equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def agent_state(runner: Runner) -> dict:
    """Model parameters, Adam moments and step counts, normaliser statistics, GradScaler, scheduler."""
    agent = runner.agent
    return {
        "modules": {name: module.state_dict() for name, module in agent.checkpoint_modules.items()},
        "scaler": agent.scaler.state_dict(),
        "scheduler": agent.scheduler.state_dict(),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A: 4 iterations straight. B: a SIGTERM stops it after 3, with checkpoints at 2 and 3; it is resumed in
    its own folder from iteration 2 (as if killed during iteration 4, after iteration 3 went to TensorBoard and
    progress.jsonl but not to a checkpoint) up to 4. C: a new run from B's iteration-2 checkpoint file, without
    resume=true."""
    tmp = tmp_path_factory.mktemp("resume")
    full, full_dir = train(
        tmp, "max_iterations=4", "experiment=full", "train.checkpoint_interval=1", "train.keep_checkpoints=2"
    )
    part_dir = train_until_sigterm(tmp, 3, "max_iterations=4", "experiment=part", "train.checkpoint_interval=2")
    iteration_2 = tmp / "iter_2_copy.pt"
    shutil.copy(part_dir / "checkpoints" / "iter_2.pt", iteration_2)
    with open(part_dir / "progress.jsonl", "a") as progress_file:
        progress_file.write('{"iteration": 4, "timest')  # a line cut short by a kill
    resumed, resumed_dir = train(tmp, "max_iterations=4", "resume=true", f"checkpoint={part_dir}/checkpoints/iter_2.pt")
    assert resumed_dir == part_dir
    fresh, fresh_dir = train(tmp, "max_iterations=4", "experiment=from_file", f"checkpoint={iteration_2}")
    return {
        "tmp": tmp,
        "full": full,
        "full_dir": full_dir,
        "resumed": resumed,
        "resumed_dir": resumed_dir,
        "fresh": fresh,
        "fresh_dir": fresh_dir,
        "iteration_2": iteration_2,
    }


def test_a_resumed_run_ends_bitwise_where_the_uninterrupted_run_ends(runs):
    assert_bitwise_equal(agent_state(runs["full"]), agent_state(runs["resumed"]))
    assert_bitwise_equal(agent_state(runs["full"]), agent_state(runs["fresh"]))
    assert runs["resumed"].iteration == runs["fresh"].iteration == 4
    full_env, resumed_env = runs["full"].task.state_dict(), runs["resumed"].task.state_dict()
    assert torch.equal(full_env["generator"], resumed_env["generator"])  # (evaluation ran the same episodes after)


def test_progress_and_tensorboard_continue_at_the_right_step_without_duplicates(runs):
    expected = progress(runs["full_dir"])
    assert [p["iteration"] for p in expected] == [1, 2, 3, 4]
    assert any(p["mean_return"] is not None for p in expected)
    # resume=true in the run folder: iteration 3 written before the "kill" is dropped and written again
    assert progress(runs["resumed_dir"]) == expected
    # a plain checkpoint file: a new run folder continuing the counters
    assert progress(runs["fresh_dir"]) == expected[2:]

    reference = scalars(runs["full_dir"])
    assert [step for step, _ in reference["Loss / Policy loss"]] == [8, 16, 24, 32]  # timestep = iteration * rollouts
    assert scalars(runs["resumed_dir"]) == reference  # TensorBoard's purge hides the orphaned iteration-3 points
    fresh = scalars(runs["fresh_dir"])
    assert fresh == {tag: [(s, v) for s, v in points if s > 16] for tag, points in reference.items()}


def test_a_task_without_a_state_dict_resumes_its_models_and_counters_with_fresh_environments(tmp_path, monkeypatch):
    """Gymnasium (and simulator) tasks keep their state outside the process's tensors: a resume restores the
    models, optimizer and counters, and starts the environments with a reset."""
    monkeypatch.setattr(Runner, "evaluate", lambda self, episodes: None)  # 1000 Pendulum steps: not the point here
    gym = [
        "task=gym:Pendulum-v1",
        "num_envs=4",
        "train.models.units=[8]",
        "train.ppo.rollouts=8",
        "train.ppo.mini_batches=2",
        "train.ppo.learning_epochs=1",
    ]
    first = Runner(load_config([*gym, "max_iterations=1", f"runs_dir={tmp_path}"]), disable_progressbar=True)
    run = first.train().run_dir
    second = Runner(
        load_config([*gym, "max_iterations=2", f"runs_dir={tmp_path}", f"checkpoint={run}"]), disable_progressbar=True
    )
    summary = second.train()
    assert summary.iterations == 2 and [p.iteration for p in summary.history] == [2]
    assert ckpt.load(summary.run_dir / "checkpoints" / "last.pt")["local"][0]["task"] is None


def test_keeps_the_newest_n_checkpoints_plus_best_and_last(runs):
    folder = runs["full_dir"] / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "iter_3.pt", "iter_4.pt", "last.pt"]
    returns = {p["iteration"]: p["mean_return"] for p in progress(runs["full_dir"]) if p["mean_return"] is not None}
    best_iteration = max(returns, key=returns.get)
    best = ckpt.load(folder / "best.pt")
    assert best["iteration"] == best_iteration and best["best_return"] == returns[best_iteration]
    assert ckpt.load(folder / "last.pt")["iteration"] == 4
    assert not list(folder.glob(".*.tmp"))  # atomic writes leave no temporary files behind


def test_truncated_and_foreign_checkpoints_are_refused_in_one_line_naming_the_file(runs, capsys):
    tmp = runs["tmp"]
    data = runs["iteration_2"].read_bytes()
    truncated = tmp / "truncated.pt"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    foreign = tmp / "foreign.pt"
    torch.save({"weights": torch.zeros(3), "step": 7}, foreign)
    pickled = tmp / "pickled.pt"
    when = datetime.date(2026, 1, 1)  # loading it would need unpickling code
    torch.save({"format": ckpt.FORMAT, "modules": {}, "when": when}, pickled)
    empty = tmp / "empty.pt"
    empty.write_bytes(b"")
    cases = [
        (truncated, "truncated"),
        (foreign, "not an omni-sfp checkpoint (a dict with keys weights, step"),
        (pickled, "not an omni-sfp checkpoint"),
        (empty, "empty"),
    ]
    for path, what in cases:
        for mode in (["max_iterations=4"], ["test=true"]):
            assert main([*SMALL, f"checkpoint={path}", f"runs_dir={tmp / 'refused'}", *mode]) == 2
            err = capsys.readouterr().err.strip()
            assert err.count("\n") == 0 and "Traceback" not in err, err
            assert f"checkpoint {path}:" in err and what in err, err
    assert not (tmp / "refused").exists()  # refused before a run folder (or an environment) was made


def test_the_cli_refuses_a_truncated_checkpoint_with_exactly_one_line_and_exit_code_2(runs):
    data = runs["iteration_2"].read_bytes()
    truncated = runs["tmp"] / "cut.pt"
    truncated.write_bytes(data[:4096])
    result = subprocess.run(
        [sys.executable, "-m", "omni_sfp.train", *SMALL, f"checkpoint={truncated}"],
        cwd=runs["tmp"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"omni_sfp.train: error: checkpoint {truncated}: truncated (4096 bytes, the "
        "end of its zip archive is missing); it was not written completely: use "
        "another checkpoint of the run"
    )


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["max_iterations=2"], "already at iteration 2"),
        (["max_iterations=4", "num_envs=32"], "saved with num_envs=16, this run has num_envs=32"),
        (["max_iterations=4", "resume=true"], "not in one"),
    ],
)
def test_a_checkpoint_this_config_cannot_continue_is_refused(runs, capsys, overrides, expected):
    assert main([*SMALL, f"checkpoint={runs['iteration_2']}", f"runs_dir={runs['tmp'] / 'refused'}", *overrides]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(runs["iteration_2"]) in err


def _wait_for_lines(path: Path, count: int, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= count:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {count} progress lines in {timeout} s")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_at_the_iteration_boundary_with_a_final_checkpoint(tmp_path, sig, code):
    progress_file = tmp_path / "progress.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omni_sfp.train",
            *SMALL,
            "max_iterations=100000",
            "train.checkpoint_interval=0",
            f"runs_dir={tmp_path}",
            f"progress_file={progress_file}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    try:
        _wait_for_lines(progress_file, 2, process)
        process.send_signal(sig)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and f"stopped by {sig.name}" in stderr
    (run,) = (tmp_path / "Cartpole").iterdir()
    lines = (run / "progress.jsonl").read_text().splitlines()
    last = ckpt.load(run / "checkpoints" / "last.pt")
    assert last["iteration"] == json.loads(lines[-1])["iteration"] == len(lines) >= 2
    assert f"resume=true checkpoint={run}" in stderr


def test_a_recurrent_run_resumes_bitwise_with_the_hidden_states_of_its_rollout(tmp_path):
    """The hidden states the next rollout starts from are part of the checkpoint: a recurrent run resumed from its
    iteration-2 checkpoint ends where the uninterrupted run ends, bit for bit (restarting them at zero would not)."""
    recurrent = [
        "task=CartpolePositions",
        "num_envs=8",
        "train.ppo.rollouts=16",
        "train.ppo.mini_batches=2",
        "train.ppo.learning_epochs=2",
        "task.env.max_episode_length=40",  # episodes outlive an iteration: the states cross the checkpoint
        "max_iterations=3",
    ]

    def run(*overrides: str) -> Runner:
        runner = Runner(load_config([*recurrent, f"runs_dir={tmp_path}", *overrides]), disable_progressbar=True)
        runner.train()
        return runner

    full = run("experiment=full", "train.checkpoint_interval=1", "train.keep_checkpoints=3")
    iteration_2 = next((tmp_path / "CartpolePositions").glob("*full*/checkpoints/iter_2.pt"))
    saved = torch.load(iteration_2, weights_only=True)["agent"]["rnn_states"]
    assert saved is not None and any(state.abs().sum() > 0 for state in saved)
    resumed = run("experiment=resumed", f"checkpoint={iteration_2}")
    assert_bitwise_equal(agent_state(full), agent_state(resumed))
    assert_bitwise_equal(full.agent._rnn_states, resumed.agent._rnn_states)
