"""omni_sfp.run.checkpoint (the file: atomic, versioned, refused in one line) and omni_sfp.run.folder.Checkpoints (what
the runner saves and restores), on tiny in-process runs. The end-to-end resume (an interrupted run continued
equals the uninterrupted one, bitwise) is tests/test_resume.py, in the slow tier."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from skrl.utils import set_seed

from omni_sfp.config.values import max_iterations
from omni_sfp.envs.registry import make_env
from omni_sfp.ppo.loop import Learner
from omni_sfp.run import checkpoint as ckpt
from omni_sfp.run.compose import load_config
from omni_sfp.run.folder import Checkpoints
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
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same(a, b, where="state"):
    """Equal structure, equal values; tensors bitwise (``torch.equal``)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{index}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def build(tmp_path: Path, *overrides: str, seed: int = 0) -> tuple[Learner, Checkpoints]:
    cfg = load_config([*SMALL, f"seed={seed}", *overrides])
    set_seed(seed)
    env = make_env("Cartpole", num_envs=8, device=CPU, seed=seed, task_cfg={"max_episode_length": 6})
    agent = build_agent(cfg, env, build_models(cfg, env, CPU), CPU, run_dir=None)
    learner = Learner(env, agent, iterations=max_iterations(cfg))
    run_dir = tmp_path / f"run_{seed}"
    (run_dir / "checkpoints").mkdir(parents=True)
    checkpoints = Checkpoints(cfg, learner, run_dir)
    learner.checkpoint = checkpoints.after_iteration
    return learner, checkpoints


# ---- the file ----------------------------------------------------------------------------------------------------
def test_a_crash_mid_write_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "last.pt"
    ckpt.save_atomic({"iteration": 1, "weights": torch.arange(4.0)}, path)
    old = path.read_bytes()

    def half_then_die(payload, file):  # the process is killed halfway through writing: no cleanup runs
        file.write(b"PK\x03\x04" + b"\0" * 100)
        file.flush()
        os._exit(9)

    pid = os.fork()
    if pid == 0:  # the child writes the new checkpoint and dies in the middle
        torch.save = half_then_die
        ckpt.save_atomic({"iteration": 2, "weights": torch.zeros(4)}, path)
        os._exit(0)  # not reached
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9
    assert path.read_bytes() == old  # the target was never opened for writing
    assert torch.load(path, weights_only=True)["iteration"] == 1
    leftovers = [p.name for p in tmp_path.iterdir() if p != path]
    assert len(leftovers) == 1 and leftovers[0].startswith(".last.pt.") and leftovers[0].endswith(".tmp")


def test_a_failed_write_in_process_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save_atomic({"iteration": 1}, path)
    old = path.read_bytes()

    def disk_full(payload, file):
        file.write(b"PK\x03\x04")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        ckpt.save_atomic({"iteration": 2}, path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_another_format_version_is_refused_in_one_line_naming_both_versions(tmp_path):
    old = tmp_path / "format1.pt"
    torch.save({"format": "omni_sfp.run.checkpoint/1", "modules": {}, "iteration": 3}, old)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.load(old)
    message = str(error.value)
    assert message == (
        f"checkpoint {old}: not an omni-sfp checkpoint (format 'omni_sfp.run.checkpoint/1', this version "
        f"reads '{ckpt.FORMAT}')"
    )
    incomplete = ckpt.save_atomic({"agent": {}, "iteration": 1}, tmp_path / "incomplete.pt")
    with pytest.raises(ckpt.CheckpointError, match=r"incomplete, missing timestep, local, config$"):
        ckpt.load(incomplete)


def test_a_run_folder_resolves_to_its_last_checkpoint(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ckpt.CheckpointError, match="run folder has no checkpoints/last.pt"):
        ckpt.resolve(run.parent)
    last = ckpt.save_atomic({"iteration": 1}, run / "checkpoints" / "last.pt")
    assert ckpt.resolve(run) == last and ckpt.resolve(last) == last
    assert ckpt.run_folder_of(last) is None  # no config.yaml: not a run folder
    (run / "config.yaml").write_text("seed: 0\n")
    assert ckpt.run_folder_of(last) == run.resolve()
    with pytest.raises(ckpt.CheckpointError, match="no such file or run folder"):
        ckpt.resolve(tmp_path / "nowhere")


def test_rotation_keeps_the_newest_by_iteration_number_and_never_best_or_last(tmp_path):
    for name in [*(f"iter_{n}.pt" for n in (1, 2, 9, 10, 11)), "best.pt", "last.pt"]:
        (tmp_path / name).write_bytes(b"x")
    ckpt.rotate(tmp_path, keep=2)  # by number: iter_9 is older than iter_10 (not by name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "iter_10.pt", "iter_11.pt", "last.pt"]
    ckpt.rotate(tmp_path, keep=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


def test_the_rng_states_round_trip_through_a_weights_only_file(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    np.random.standard_normal()  # leaves a cached Gaussian in NumPy's state
    path = ckpt.save_atomic({"rng": ckpt.rng_state()}, tmp_path / "rng.pt")
    expected = (torch.rand(3), np.random.standard_normal(3), [random.random() for _ in range(3)])
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    ckpt.set_rng_state(torch.load(path, weights_only=True)["rng"])
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.standard_normal(3), expected[1])
    assert [random.random() for _ in range(3)] == expected[2]


# ---- what the runner saves ---------------------------------------------------------------------------------------
def test_what_the_runner_saves_restores_a_fresh_run_exactly(tmp_path):
    learner, checkpoints = build(tmp_path, "max_iterations=2", seed=0)
    learner.learn()  # two iterations; the last one writes iter_2.pt and last.pt
    path = checkpoints.last
    assert path == tmp_path / "run_0" / "checkpoints" / "iter_2.pt"
    saved = ckpt.load(tmp_path / "run_0" / "checkpoints" / "last.pt")
    assert saved["iteration"] == 2 and saved["timestep"] == 8 and len(saved["local"]) == 1
    assert saved["config"]["train"]["ppo"]["rollouts"] == 4
    after_save = torch.rand(3)  # the RNG stream right after the checkpoint

    other, restored = build(tmp_path, "max_iterations=4", seed=7)  # other weights, envs and RNG
    restored.load_state_dict(saved, source=path)
    assert other.iteration == 2 and other.timestep == 8 and restored.best_return == checkpoints.best_return
    assert torch.equal(torch.rand(3), after_save)
    assert_same(other.agent.state_dict(), learner.agent.state_dict(), "agent")
    assert_same(restored.task.state_dict(), checkpoints.task.state_dict(), "task")
    assert torch.equal(other.observations, learner.observations)
    assert_same(other.agent.episodes.state_dict(), learner.agent.episodes.state_dict(), "episodes")


def test_models_only_restores_acting_and_leaves_the_run_where_it_is(tmp_path):
    learner, checkpoints = build(tmp_path, "max_iterations=1", seed=0)
    learner.learn()
    saved = ckpt.load(checkpoints.last)
    other, restored = build(tmp_path, "max_iterations=1", seed=7)
    optimizer_before = {k: v for k, v in other.agent.optimizer.state_dict().items() if k != "param_groups"}
    restored.load_state_dict(saved, source=checkpoints.last, models_only=True)
    observations = torch.rand(5, 4)
    act = lambda learner: learner.agent.act(observations, None, timestep=0, timesteps=0)[1]["mean_actions"]  # noqa: E731
    assert torch.equal(act(other), act(learner))
    assert other.iteration == 0 and restored.best_return == float("-inf") and other.observations is None
    assert {k: v for k, v in other.agent.optimizer.state_dict().items() if k != "param_groups"} == optimizer_before


def test_best_pt_holds_the_best_iteration_and_is_written_with_the_next_checkpoint(tmp_path):
    learner, checkpoints = build(
        tmp_path, "max_iterations=5", "train.checkpoint_interval=2", "train.keep_checkpoints=1", seed=0
    )
    returns = {}
    learner.log = lambda progress, losses: returns.__setitem__(progress.iteration, progress.mean_return)
    learner.learn()
    returns = {iteration: value for iteration, value in returns.items() if value is not None}  # an episode ended
    assert len(set(returns.values())) > 1
    folder = tmp_path / "run_0" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "iter_5.pt", "last.pt"]
    best_iteration = max(returns, key=returns.get)
    best = ckpt.load(folder / "best.pt")
    assert best["iteration"] == best_iteration and best["best_return"] == returns[best_iteration]
    assert best["best_iteration"] == best_iteration == checkpoints.best_iteration  # what the summary line names
    assert ckpt.load(folder / "last.pt")["iteration"] == 5 and checkpoints.best_return == returns[best_iteration]


def test_a_checkpoint_of_another_model_is_refused_by_name(tmp_path):
    learner, checkpoints = build(tmp_path, "max_iterations=1", seed=0)
    learner.learn()
    saved = ckpt.load(checkpoints.last)
    _, wider = build(tmp_path, "max_iterations=1", "train.models.units=[32,32]", seed=1)
    with pytest.raises(ckpt.CheckpointError, match=rf"checkpoint {checkpoints.last}: does not fit this model/task"):
        wider.load_state_dict(saved, source=checkpoints.last)


def test_runs_started_in_the_same_second_get_distinct_run_folders(tmp_path, monkeypatch):
    """Two processes of the quality benchmark once collided on one ``<timestamp>`` folder (FileExistsError):
    the name is claimed by ``mkdir``, so concurrent creators each get their own."""
    import datetime
    from concurrent.futures import ThreadPoolExecutor

    from omni_sfp.run import folder as run_folder

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(run_folder.datetime, "datetime", Frozen)
    cfg = load_config([f"runs_dir={tmp_path}", "experiment=x"])
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: run_folder.make_run_dir(cfg), range(16)))
    assert len(set(folders)) == 16 and all((f / "config.yaml").is_file() for f in folders)
    assert sorted(f.name for f in folders)[:2] == ["2026-01-01_12-00-00_x", "2026-01-01_12-00-00_x-1"]
