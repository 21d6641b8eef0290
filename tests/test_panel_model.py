"""omni_sfp.kit.panel_model: toggles, validation, Hydra overrides, and real runner subprocesses (a fake runner
module that writes progress JSON lines, and once the real ``python -m omni_sfp.train``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from omni_sfp.kit import panel_model
from omni_sfp.kit.panel_model import DEFAULTS, PanelModel, RunError, ToggleError, coerce, hydra_value

ROOT = Path(__file__).resolve().parents[1]

FAKE_RUNNER = '''
"""Stands in for `python -m omni_sfp.train`: takes the same overrides, appends progress JSON lines."""
import json, os, signal, sys, time

args = dict(a.split("=", 1) for a in sys.argv[1:])
progress = args["progress_file"]
mode = os.environ.get("FAKE_RUNNER_MODE", "train")
with open(os.environ["FAKE_RUNNER_ARGV"], "w") as f:
    json.dump(sys.argv[1:], f)

def line(i):
    return json.dumps({"iteration": i, "timestep": 16 * i, "sps": 1000.0 + i, "mean_return": 0.5 * i,
                       "sfp_hit_rate": 1.0}) + "\\n"

if mode == "train":
    go = os.environ.get("FAKE_RUNNER_GO")
    deadline = time.monotonic() + 30
    while go and not os.path.exists(go) and time.monotonic() < deadline:  # held until the test lets it go
        time.sleep(0.01)
    with open(progress, "a") as f:
        for i in range(1, int(args["max_iterations"]) + 1):
            f.write(line(i)); f.flush(); time.sleep(0.02)
elif mode == "fail":
    print("loading task", file=sys.stderr)
    print("omni_sfp.train: error: unknown task 'Nope'", file=sys.stderr)
    sys.exit(2)
elif mode in ("until_sigint", "ignore_sigint"):
    stopped = []
    if mode == "until_sigint":
        signal.signal(signal.SIGINT, lambda *_: stopped.append(1))  # the runner: finish the iteration, save
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    i = 0
    with open(progress, "a") as f:
        while not stopped:
            i += 1
            f.write(line(i)); f.flush(); time.sleep(0.05)
    with open(progress + ".saved", "w") as f:
        f.write("checkpoint")
elif mode == "partial":
    with open(progress, "ab") as f:
        f.write(b'{"iteration": 1, "sps"'); f.flush()
        while not os.path.exists(progress + ".go"):
            time.sleep(0.01)
        f.write(b': 7.0}\\nnot json\\n[1, 2]\\n'); f.flush()
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A PanelModel whose runner is the fake above; returns (model, path of the argv the runner got)."""
    (tmp_path / "fake_runner.py").write_text(FAKE_RUNNER)
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_RUNNER_ARGV", str(argv_file))
    model = PanelModel(
        {"max_iterations": 3},
        runner_module="fake_runner",
        pythonpath=[str(tmp_path)],
        workdir=str(tmp_path),
        stop_timeout_s=5.0,
    )
    yield model, argv_file
    model.shutdown(timeout=1.0)


def wait_for_progress(model: PanelModel, timeout=30.0):
    """Until the first progress line: the fake runner has installed its SIGINT handler by then."""
    deadline = time.monotonic() + timeout
    while model.readout.iteration is None:
        assert time.monotonic() < deadline, "no progress line"
        model.poll()
        time.sleep(0.01)


def wait_for(model: PanelModel, states=("finished", "failed", "stopped"), timeout=30.0):
    deadline = time.monotonic() + timeout
    while model.readout.state not in states:
        assert time.monotonic() < deadline, f"still {model.readout.state} after {timeout} s"
        model.poll()
        time.sleep(0.01)
    return model.readout


# ---- toggles -------------------------------------------------------------------------------------------
def test_defaults_are_the_documented_ones():
    model = PanelModel()
    assert model.values == DEFAULTS
    assert DEFAULTS["units"] == (256, 128, 64) and DEFAULTS["cache_check"] == "auto"
    assert model.readout.state == "idle" and not model.running


@pytest.mark.parametrize(
    "key, raw, value",
    [
        ("num_envs", "64", 64),  # `--/exts/omni.sfp/num_envs=64` may arrive as text
        ("num_envs", 64, 64),
        ("sfp_enabled", "false", False),
        ("sfp_enabled", "True", True),
        ("mixed_precision", 1, True),
        ("units", [32, 32], (32, 32)),
        ("units", "[64, 32]", (64, 32)),
        ("units", "128,64", (128, 64)),
        ("seed", "-1", -1),
        ("device", "cuda:1", "cuda:1"),
        ("cache_check", "identity", "identity"),
        ("compile", "auto", "auto"),  # the manifest's string
        ("compile", " AUTO ", "auto"),
        ("compile", True, True),  # `--/exts/omni.sfp/compile=true`: carb holds a bool
        ("compile", "false", False),
        ("compile", 0, False),
        ("task", "gym:Ant-v5", "gym:Ant-v5"),
        ("checkpoint", "/runs/a b/it's.pt", "/runs/a b/it's.pt"),
    ],
)
def test_coerce_accepts_and_normalises(key, raw, value):
    assert coerce(key, raw) == value
    model = PanelModel()
    model.set(key, raw)
    assert model.get(key) == value


@pytest.mark.parametrize(
    "key, raw, message",
    [
        ("num_envs", 0, "num_envs=0 is not allowed: expected an integer >= 1"),
        ("num_envs", "many", "num_envs='many' is not allowed: expected an integer >= 1"),
        ("num_envs", True, "num_envs=True is not allowed: expected an integer >= 1"),
        ("sfp_enabled", "maybe", "sfp_enabled='maybe' is not allowed: expected true or false"),
        (
            "cache_check",
            "sometimes",
            "cache_check='sometimes' is not allowed: expected one of identity, content, auto, off",
        ),
        ("compile", "sometimes", "compile='sometimes' is not allowed: expected true, false or auto"),
        ("compile", 2, "compile=2 is not allowed: expected true, false or auto"),
        ("units", [], "units=[] is not allowed: expected a non-empty list of integers >= 1"),
        ("units", [64, 0], "units=[64, 0] is not allowed: expected a non-empty list of integers >= 1"),
        ("device", "gpu", "device='gpu' is not allowed: expected auto, cpu, cuda or cuda:N"),
        ("task", "my task", "task='my task' is not allowed: expected a task name without spaces"),
        ("checkpoint", "${oops}", "checkpoint='${oops}' is not allowed: expected a string without '${'"),
        ("max_iterations", -5, "max_iterations=-5 is not allowed: expected an integer >= 1"),
        ("colour", "red", "colour='red' is not allowed: expected one of the keys task, num_envs"),
    ],
)
def test_bad_values_raise_one_line_naming_key_value_and_allowed(key, raw, message):
    model = PanelModel()
    before = model.values
    with pytest.raises(ToggleError) as error:
        model.set(key, raw)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert isinstance(error.value, ValueError)
    assert model.values == before


def test_update_is_all_or_nothing():
    model = PanelModel()
    with pytest.raises(ToggleError, match="num_envs"):
        model.update({"seed": 1, "num_envs": -1})
    assert model.get("seed") == 42
    assert model.update({"seed": 1, "num_envs": 8, "task": "Cartpole"}) == ["seed", "num_envs"]


def test_listeners_hear_real_changes_once_and_can_leave():
    model = PanelModel()
    heard = []
    leave = model.subscribe(lambda topic, key: heard.append((topic, key)))
    model.set("num_envs", 64)
    model.set("num_envs", "64")  # no change: no event
    model.set("units", [256, 128, 64])  # equal to the default: no event
    assert heard == [("values", "num_envs")]
    leave()
    model.set("num_envs", 32)
    assert heard == [("values", "num_envs")] and model.listener_count == 0


# ---- Hydra overrides -----------------------------------------------------------------------------------
def test_default_overrides_follow_the_contract():
    assert PanelModel().to_overrides() == [
        "task=Cartpole",
        "num_envs=512",
        "train.sfp.enabled=true",
        "train.sfp.cache_check=auto",
        "train.mixed_precision=false",
        "train.models.units=[256,128,64]",
        "train.models.compile=auto",
        "max_iterations=50",
        "checkpoint=''",
        "headless=true",
        "seed=42",
        "device=auto",
        "video=false",
        "export=false",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Cartpole",
        "gym:Ant-v5",
        "cuda:0",
        "/abs/path/agent_10.pt",
        "runs/a b/c.pt",
        "it's.pt",
        "null",
        "true",
        "123",
        "1e3",
        "a,b",
        "x=y",
        "C:\\runs\\",
        "C:\\runs\\'q",
        "tab\there",
        "ünïcode.pt",
        "[1,2]",
        "{a: 1}",
    ],
)
def test_string_values_survive_hydras_override_grammar(value):
    parsed = OverridesParser.create().parse_override(f"checkpoint={hydra_value(value)}")
    assert parsed.value() == value


def test_changed_toggles_change_the_overrides():
    model = PanelModel()
    model.update({"num_envs": 64, "sfp_enabled": False, "units": [32, 32], "checkpoint": "runs/x/last.pt"})
    overrides = model.to_overrides()
    assert "num_envs=64" in overrides and "train.sfp.enabled=false" in overrides
    assert "train.models.units=[32,32]" in overrides and "checkpoint=runs/x/last.pt" in overrides
    assert not any(o.startswith("python_exe") for o in overrides)  # launcher-only


@pytest.mark.parametrize("value", [True, False, "auto"])
def test_the_compile_toggle_reaches_the_runner_as_true_false_or_auto(value):
    from omni_sfp.run.compose import load_config

    model = PanelModel({"compile": value})
    assert f"train.models.compile={str(value).lower()}" in model.to_overrides()
    assert load_config(model.to_overrides()).train.models.compile == value


def test_the_runner_config_loader_accepts_the_overrides(tmp_path):
    from omni_sfp.run.compose import load_config

    model = PanelModel({"num_envs": 16, "units": [8], "checkpoint": str(tmp_path / "a b.pt"), "device": "cpu"})
    cfg = load_config([*model.to_overrides(), f"progress_file={hydra_value(str(tmp_path / 'p.jsonl'))}"])
    assert cfg.num_envs == 16 and list(cfg.train.models.units) == [8] and cfg.checkpoint == str(tmp_path / "a b.pt")


# ---- tasks ---------------------------------------------------------------------------------------------
def test_tasks_come_from_the_registry_and_keep_the_current_one():
    from omni_sfp.envs import registry

    model = PanelModel()
    assert model.tasks() == registry.list_tasks() and "Cartpole" in model.tasks()
    model.set("task", "gym:Pendulum-v1")
    assert model.tasks()[-1] == "gym:Pendulum-v1"


def test_unknown_task_is_named_with_close_matches():
    from omni_sfp.envs.registry import UnknownTaskError

    model = PanelModel({"task": "Cartpol"})
    with pytest.raises(UnknownTaskError, match="did you mean 'Cartpole'"):
        model.check_task()


# ---- the interpreter -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, expected",
    [
        ("python", True),
        ("python3", True),
        ("python3.10", True),
        ("python.sh", True),
        ("python.exe", True),
        ("kit", False),
        ("isaac-sim.sh", False),
        ("pythonista", False),
    ],
)
def test_looks_like_python(name, expected):
    assert panel_model.looks_like_python(f"/opt/x/{name}") is expected


def test_resolve_python_prefers_the_setting_then_sys_executable():
    assert panel_model.resolve_python("", executable="/usr/bin/python3.11") == "/usr/bin/python3.11"
    assert panel_model.resolve_python(sys.executable) == sys.executable
    with pytest.raises(RunError, match=r"python_exe='/no/such/python' is not an executable file"):
        panel_model.resolve_python("/no/such/python")


@pytest.mark.parametrize("executable", ["kit/kit", "kit/python/bin/python3"])
def test_inside_isaac_sim_python_sh_is_used(tmp_path, executable):
    # Isaac Sim: sys.executable is <root>/kit/kit (GUI) or Kit's bundled Python; <root>/python.sh sets them up
    python_sh = tmp_path / "python.sh"
    for path in (tmp_path / executable, python_sh):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    assert panel_model.resolve_python("", executable=str(tmp_path / executable)) == str(python_sh)


def test_a_kit_binary_without_python_sh_uses_kits_bundled_python(tmp_path):
    kit, bundled = tmp_path / "kit", tmp_path / "python" / "bin" / "python3"
    for path in (kit, bundled):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    assert panel_model.resolve_python("", executable=str(kit)) == str(bundled)


# ---- runs ----------------------------------------------------------------------------------------------
def test_training_runs_without_blocking_and_progress_reaches_the_readout(fake, monkeypatch, tmp_path):
    """start_training returns while the runner is still held at its start (no wall-clock bound: a slow
    machine makes it slower, not wrong), and the runner's progress reaches the readout once it goes on."""
    model, argv_file = fake
    go = tmp_path / "go"
    monkeypatch.setenv("FAKE_RUNNER_MODE", "train")
    monkeypatch.setenv("FAKE_RUNNER_GO", str(go))
    events = []
    model.subscribe(lambda topic, key: events.append(topic))
    readout = model.start_training()  # would hang here if it waited for the runner, which waits for `go`
    assert readout.state == "running" and model.running and readout.iteration is None
    go.touch()
    readout = wait_for(model)
    assert readout.state == "finished" and readout.exit_code == 0
    assert (readout.iteration, readout.timestep, readout.sps, readout.mean_return, readout.sfp_hit_rate) == (
        3,
        48,
        1003.0,
        1.5,
        1.0,
    )
    assert "readout" in events and not model.running
    argv = json.loads(argv_file.read_text())
    assert argv[:-1] == model.to_overrides()
    assert argv[-1] == f"progress_file={Path(readout.run_dir) / 'progress.jsonl'}"
    assert readout.command[1:3] == ("-m", "fake_runner") and readout.summary() == "finished, exit code 0"


def test_a_failed_run_reports_its_exit_code_and_last_error_line(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "fail")
    model.start_training()
    readout = wait_for(model)
    assert readout.state == "failed" and readout.exit_code == 2
    assert readout.last_stderr == "omni_sfp.train: error: unknown task 'Nope'"
    assert readout.summary() == "failed, exit code 2 (omni_sfp.train: error: unknown task 'Nope')"


def test_stop_interrupts_so_the_runner_can_save(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "until_sigint")
    readout = model.start_training()
    progress = Path(readout.run_dir) / "progress.jsonl"
    wait_for_progress(model)
    assert model.stop() is True
    assert model.readout.state == "stopping"  # Stop returns at once: only poll() sees the runner end
    readout = wait_for(model)
    assert readout.state == "stopped" and readout.exit_code == 0
    assert Path(str(progress) + ".saved").read_text() == "checkpoint"  # it got SIGINT, not SIGKILL
    assert model.stop() is False  # nothing left to stop


def test_stop_kills_a_runner_that_ignores_sigint(fake, monkeypatch):
    model, _ = fake
    model._stop_timeout_s = 0.5
    monkeypatch.setenv("FAKE_RUNNER_MODE", "ignore_sigint")
    model.start_training()
    wait_for_progress(model)
    model.stop()
    readout = wait_for(model, timeout=10)
    assert readout.state == "stopped" and readout.exit_code == -signal.SIGKILL


def test_shutdown_stops_a_run_and_blocks_until_it_ended(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "until_sigint")
    model.start_training()
    wait_for_progress(model)
    model.shutdown(timeout=5.0)
    assert not model.running and model.readout.state == "stopped" and model.listener_count == 0


def test_one_run_at_a_time(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "until_sigint")
    model.start_training()
    with pytest.raises(RunError, match=r"a run is already running \(pid \d+\); Stop it first"):
        model.start_training()
    model.stop(wait=True)


def test_test_needs_an_existing_checkpoint_then_runs_with_test_true(fake, monkeypatch, tmp_path):
    model, argv_file = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "train")
    with pytest.raises(ToggleError, match=r"checkpoint='' is not allowed: expected a run folder or a checkpoint file"):
        model.start_test()
    model.set("checkpoint", "missing.pt")
    with pytest.raises(ToggleError, match=r"checkpoint='missing.pt' is not allowed: expected an existing run folder"):
        model.start_test()
    (tmp_path / "agent.pt").write_bytes(b"")
    model.set("checkpoint", "agent.pt")  # relative to the runner's working directory
    assert model.start_test().mode == "test"
    wait_for(model)
    argv = json.loads(argv_file.read_text())
    assert "test=true" in argv and "checkpoint=agent.pt" in argv


def test_test_takes_a_run_folder_as_the_command_line_does(fake, monkeypatch, tmp_path):
    """The panel's Test accepts exactly the checkpoints ``python -m omni_sfp.train test=true checkpoint=...``
    accepts: a file, or a run folder with checkpoints/last.pt (omni_sfp.run.checkpoint.resolve)."""
    from omni_sfp.run.checkpoint import CheckpointError, resolve

    model, argv_file = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "train")
    run = tmp_path / "runs" / "Cartpole" / "run"
    (run / "checkpoints").mkdir(parents=True)
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "agent.pt").write_bytes(b"")
    for path in ("runs/Cartpole/run", "empty_run", "agent.pt", "nothing"):
        try:
            resolve(tmp_path / path)
            cli_accepts = True
        except CheckpointError:
            cli_accepts = False
        model.set("checkpoint", path)
        try:
            model.start_test()
            wait_for(model)
            panel_accepts = True
        except ToggleError:
            panel_accepts = False
        assert panel_accepts == cli_accepts, path
        if path == "runs/Cartpole/run":
            assert not cli_accepts  # no checkpoint in it yet
            (run / "checkpoints" / "last.pt").write_bytes(b"")
            model.start_test()
            wait_for(model)
            assert "checkpoint=runs/Cartpole/run" in json.loads(argv_file.read_text())


def test_each_runs_temporary_folder_is_removed_by_the_next_start_and_at_shutdown(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "train")
    first = Path(model.start_training().run_dir)
    wait_for(model)
    assert (first / "stdout.log").is_file()  # kept while the readout shows that run
    second = Path(model.start_training().run_dir)
    assert not first.exists() and second.is_dir()
    wait_for(model)
    model.shutdown()
    assert not second.exists()


def test_progress_lines_are_read_only_when_complete_and_bad_lines_are_counted(fake, monkeypatch):
    model, _ = fake
    monkeypatch.setenv("FAKE_RUNNER_MODE", "partial")
    readout = model.start_training()
    progress = Path(readout.run_dir) / "progress.jsonl"
    deadline = time.monotonic() + 20
    while not (progress.exists() and progress.stat().st_size > 0):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert model.poll() is False and model.readout.iteration is None  # half a line: nothing yet
    Path(str(progress) + ".go").write_text("")
    readout = wait_for(model)
    assert (readout.iteration, readout.sps, readout.bad_lines) == (1, 7.0, 2)


def test_a_missing_interpreter_is_one_line(fake):
    model, _ = fake
    model.set("python_exe", "/no/such/python")
    with pytest.raises(RunError, match=r"python_exe='/no/such/python' is not an executable file"):
        model.start_training()
    assert model.readout.state == "idle"


@pytest.mark.slow
def test_the_real_runner_trains_one_iteration(tmp_path):
    model = PanelModel({"num_envs": 16, "max_iterations": 1, "units": [16], "device": "cpu"}, workdir=str(tmp_path))
    model.start_training()
    readout = wait_for(model, timeout=180)
    assert readout.state == "finished", (readout.last_stderr, (Path(readout.run_dir) / "stderr.log").read_text())
    assert readout.iteration == 1 and readout.sps > 0 and readout.timestep > 0
    assert readout.sfp_hit_rate is not None and 0.0 <= readout.sfp_hit_rate <= 1.0
    assert os.listdir(tmp_path / "runs")  # its run folder went to the working directory


def test_the_fake_runner_is_importable_only_through_pythonpath(fake):
    # the runner's PYTHONPATH: the model's folders, then this checkout, then the inherited one
    model, _ = fake
    env = model._environment()
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == model.pythonpath[0] and parts[1] == str(ROOT) and env["PYTHONUNBUFFERED"] == "1"
