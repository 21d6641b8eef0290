"""The benchmark's pieces: every row runs and reports finite numbers, the ratio arithmetic, the replay env, the
Welch verdicts and the CLI's one-line errors. Tiny sizes: the numbers themselves mean nothing here."""

import dataclasses
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from omni_sfp.bench import report
from omni_sfp.bench.__main__ import build_parser, main
from omni_sfp.bench.configs import DEFAULT_ROWS, PRESETS, ROWS, Work, precision_effect, select_rows
from omni_sfp.bench.envs import make_bench_env
from omni_sfp.bench.quality import welch
from omni_sfp.bench.replay import Recording, ReplayTask, record
from omni_sfp.bench.timing import run_worker
from omni_sfp.bench.worker import measure

ROOT = Path(__file__).resolve().parents[2]
QUICK, _ = PRESETS["quick"]
HAS_RLGAMES = importlib.util.find_spec("rl_games") is not None
NO_RLGAMES = "rl_games is not installed (it is in the optional [bench] extra: pip install 'omni-sfp[bench]')"


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """One quick run of every row. rl_games runs in a worker process, as in the benchmark: it sets torch-wide
    flags (matmul precision, print options) that must not leak into this test process."""
    scratch = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    runs = {}
    try:
        for row in ROWS.values():
            if row.compile:
                continue  # compiling costs tens of seconds; tests/bench/test_issue14.py covers the report's side
            if row.framework == "rlgames":
                if HAS_RLGAMES:
                    runs[row.id] = run_worker(
                        row,
                        QUICK,
                        device="cpu",
                        seed=0,
                        threads=1,
                        replay=None,
                        rlgames_compile=False,
                        scratch=scratch,
                        tag=row.id,
                    )
            else:
                runs[row.id] = measure(row, QUICK, device="cpu", seed=0, threads=1, scratch=scratch)
    finally:
        torch.set_num_threads(threads)
    return runs


@pytest.mark.slow
def test_every_row_of_the_quick_preset_times_its_updates_with_finite_numbers(quick_runs, tmp_path):
    expected = [r for r in ROWS if (HAS_RLGAMES or not r.startswith("rlgames")) and not ROWS[r].compile]
    assert sorted(quick_runs) == sorted(expected)
    for row_id, run in quick_runs.items():
        assert run["seconds"] > 0 and math.isfinite(run["seconds"]), row_id
        assert len(run["update_seconds"]) == QUICK.updates, row_id
        assert run["threads"] == 1, row_id
    assert quick_runs["omni-sfp-fp32"]["info"]["sfp_hit_rate"] == 1.0
    assert "sfp_hit_rate" not in quick_runs["omni-double-fp32"]["info"]
    for row_id, run in quick_runs.items():  # every row names the CPU choices it ran with
        if ROWS[row_id].framework != "ceiling":
            assert run["info"]["kernels"]["choices"]["threads"] == 1, row_id
    for row_id in ("omni-sfp-fp32", "bare-ppo-fp32", "floor-fp32"):  # the floor splits them as the others
        run = quick_runs[row_id]
        assert len(run["rollout_seconds"]) == len(run["learning_seconds"]) == QUICK.updates, row_id
        assert sum(run["rollout_seconds"]) + sum(run["learning_seconds"]) == pytest.approx(run["seconds"]), row_id
    omni = quick_runs["omni-sfp-fp32"]["info"]["kernels"]
    assert omni["sources"]["threads"] == "forced" and omni["sources"]["elu_autograd"] in ("measured", "cached")

    rows = [ROWS[r] for r in expected]
    entries = report.summarize(rows, {r: [run] for r, run in quick_runs.items()}, QUICK)
    document = {
        "preset": "quick",
        "repetitions": 1,
        "work": dataclasses.asdict(QUICK),
        "rows": entries,
        "targets": report.targets(entries, QUICK),
        "meta": {
            "date": "today",
            "cpu": "cpu",
            "cores": 2,
            "device": "cpu",
            "threads": 1,
            "load_before": 0.0,
            "load_after": 0.0,
            "python": "3",
            "torch": "t",
            "skrl": "s",
            "rl_games": "r",
            "command": "python -m omni_sfp.bench table --quick",
            "env": "ConstantCost",
            "cpu_flags": ["avx2", "avx512f"],
        },
    }
    paths = report.save(document, tmp_path / "bench")
    assert all(p.is_file() for p in paths)
    table = paths[1].read_text()
    assert "- CPU flags that decide the kernels: avx2 avx512f" in table
    floor = quick_runs["floor-fp32"]["info"]["kernels"]["choices"]
    assert f"| {report.kernels_text(floor)} |" in table and "ELU torch/torch, glibc, fused Adam, 1 thread" in table
    assert all(f"| {ROWS[r].label} |" in table for r in expected)
    sfp = next(e for e in entries if e["id"] == "omni-sfp-fp32")
    assert f"- {sfp['label']}: {sfp['vs_bare_ppo']:.3f}x" in table  # the framework overhead, under the table
    for entry in json.loads(paths[0].read_text())["rows"]:
        for key in ("run_s", "update_s"):
            assert all(math.isfinite(value) for value in entry[key].values())
        if HAS_RLGAMES and entry["id"] != "rlgames-mixed":
            assert entry["vs_rlgames_mixed"] > 0


@pytest.mark.slow
@pytest.mark.skipif(not HAS_RLGAMES, reason=NO_RLGAMES)
def test_rlgames_is_driven_the_oige_way_with_compile_off_and_max_steps_unset(quick_runs, tmp_path):
    from omni_sfp.bench.rlgames import rlgames_config

    config = rlgames_config(
        QUICK,
        ROWS["rlgames-mixed"],
        device="cpu",
        seed=0,
        threads=1,
        train_dir=str(tmp_path),
        compile_model=False,
        bounded_actions=True,
    )["params"]["config"]
    assert config["torch_compile"] is False and "max_steps" not in config
    assert config["max_epochs"] == QUICK.total_updates and config["lr_schedule"] is None
    assert config["minibatch_size"] == QUICK.minibatch_size and config["mini_epochs"] == QUICK.epochs
    assert quick_runs["rlgames-mixed"]["precision"] == "fp32 (rl_games' mixed precision is CUDA-only)"
    info = quick_runs["rlgames-fp32"]["info"]
    assert (info["torch_compile"], info["fused_adam"]) == (False, True)
    assert info["float32_matmul_precision"] == "highest"  # rl_games' Runner sets "high" (TF32); undone for fp32
    assert info["kernels"]["choices"] == {
        "elu_no_grad": "torch",
        "elu_autograd": "torch",
        "allocator": "glibc",
        "fused_adam": True,
        "threads": 1,
    }


def _fake(seconds, precision="fp32"):
    return [{"seconds": s, "precision": precision, "info": {}} for s in seconds]


def test_medians_slowing_factors_speedup_and_targets_from_hand_made_numbers():
    work = dataclasses.replace(QUICK, updates=4)
    runs = {
        "rlgames-fp32": _fake([12.0, 10.0, 14.0]),
        "rlgames-mixed": _fake([8.0, 9.0, 7.0]),
        "omni-double-fp32": _fake([20.0, 21.0, 19.0]),
        "omni-sfp-fp32": _fake([10.0, 9.0, 11.0]),
        "bare-ppo-fp32": _fake([8.0, 9.0, 8.0]),
        "floor-fp32": _fake([8.0, 8.0, 8.0]),
    }
    entries = {e["id"]: e for e in report.summarize(select_rows(",".join(runs)), runs, work)}
    sfp = entries["omni-sfp-fp32"]
    assert sfp["run_s"] == {"median": 10.0, "min": 9.0, "max": 11.0}
    assert sfp["update_s"] == {"median": 2.5, "min": 2.25, "max": 2.75}
    assert sfp["vs_rlgames_mixed"] == pytest.approx(10 / 8)
    assert sfp["vs_rlgames_fp32"] == pytest.approx(10 / 12)
    assert sfp["vs_floor"] == pytest.approx(10 / 8)
    assert sfp["vs_bare_ppo"] == pytest.approx(10 / 8) and entries["bare-ppo-fp32"]["vs_floor"] == 1.0
    assert sfp["sfp_speedup"] == pytest.approx(20 / 10)
    assert entries["omni-double-fp32"]["sfp_speedup"] is None and entries["rlgames-fp32"]["vs_rlgames_fp32"] == 1.0

    found = {t["name"]: t for t in report.targets(list(entries.values()), work)}
    assert found["omni-sfp vs rl_games, fp32 (issue 7)"]["value"] == pytest.approx(10 / 12)
    assert found["omni-sfp vs rl_games, fp32 (issue 7)"]["met"] is True  # 0.833 <= 0.95 (not the small network)
    assert found["SFP speedup over double pass, fp32 (issue 14)"]["met"] is True  # 2.0 >= 1.92
    assert found["omni-sfp vs compute floor, fp32 (issue 14)"]["met"] is False  # 1.25 > 1.02
    assert "omni-sfp vs rl_games, mixed precision (issue 14)" not in found  # its row did not run
    small = dataclasses.replace(work, units=(256, 128, 64))
    assert (
        next(t for t in report.targets(list(entries.values()), small) if "rl_games, fp32" in t["name"])["met"] is False
    )


def test_row_selection_and_the_precision_each_row_really_computes():
    assert [r.id for r in select_rows("default")] == list(DEFAULT_ROWS)
    assert len(select_rows("all")) == len(ROWS) > len(DEFAULT_ROWS)
    assert [r.id for r in select_rows("floor-fp32,rlgames-fp32")] == ["rlgames-fp32", "floor-fp32"]
    with pytest.raises(ValueError, match="nope"):
        select_rows("nope")
    assert precision_effect(ROWS["rlgames-mixed"], "cuda") == "bf16 autocast + GradScaler"
    assert "CUDA-only" in precision_effect(ROWS["rlgames-mixed"], "cpu")
    assert precision_effect(ROWS["omni-sfp-mixed"], "cpu") == "bf16 autocast"


def test_replay_plays_back_exactly_what_was_recorded_then_loops_with_a_truncation(tmp_path):
    recording = record("LQR60x8", steps=5, num_envs=4, device="cpu", seed=3)
    recording.save(tmp_path / "rec.pt")
    loaded = Recording.load(tmp_path / "rec.pt", "cpu")
    assert torch.equal(loaded.observations, recording.observations) and loaded.task == "LQR60x8"

    replay = ReplayTask(loaded, phase=0)
    observations, _ = replay.reset()
    assert torch.equal(observations, recording.observations[0])
    actions = torch.zeros(4, 8)
    for _lap in range(2):
        for t in range(5):
            observations, rewards, terminated, truncated, _ = replay.step(actions)
            assert torch.equal(rewards, recording.rewards[t])
            assert torch.equal(terminated, recording.terminated[t])
            following = (t + 1) % 5
            assert torch.equal(observations, recording.observations[following])
            assert truncated.all() if following == 0 else torch.equal(truncated, recording.truncated[t])


def test_staggered_replay_phases_play_each_env_its_own_recorded_stream():
    recording = record("ConstantCost", steps=4, num_envs=4, device="cpu", seed=0)
    replay = ReplayTask(recording)  # default phases 0, 1, 2, 3: one env loops on every step
    observations, _ = replay.reset()
    for t in range(8):
        position = (torch.arange(4) + t) % 4
        assert torch.equal(observations, recording.observations[position, torch.arange(4)])
        observations, rewards, _, truncated, _ = replay.step(torch.zeros(4, 8))
        assert torch.equal(rewards, recording.rewards[position, torch.arange(4)])
        assert truncated.sum() == 1


def test_the_benchmark_env_truncates_one_env_per_step_from_the_first_step():
    env = make_bench_env(QUICK, device="cpu", seed=0)
    env.reset()
    for _ in range(2 * QUICK.episode_length):
        *_, truncated, _ = env.step(torch.zeros(QUICK.num_envs, 8))
        assert int(truncated.sum()) == QUICK.num_envs // QUICK.episode_length


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([100.0, 101.0, 99.0, 100.5, 99.5], [100.2, 99.8, 100.9, 99.1, 100.0], "no significant difference"),
        ([100.0, 101.0, 99.0, 100.5, 99.5], [90.0, 91.0, 89.0, 90.5, 89.5], "significant difference"),
        ([100.0], [90.0, 91.0], "undetermined"),
        ([5.0, 5.0], [5.0, 5.0], "identical results"),
    ],
)
def test_welch_verdicts(a, b, expected):
    result = welch("single vs double pass, fp32", a, b)
    assert result["verdict"].startswith(f"single vs double pass, fp32: {expected}")
    assert "\n" not in result["verdict"]
    if expected.endswith("difference"):
        assert result["significant"] is (expected == "significant difference")
        assert result["p_value"] == pytest.approx(__import__("scipy").stats.ttest_ind(a, b, equal_var=False).pvalue)


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "the following arguments are required: COMMAND"),
        (["--quick"], "--quick: a command comes first (table, quality,"),  # the old flags
        (["--cold-start", "--repetitions", "3"], "then its flags: python -m omni_sfp.bench coldstart ..."),
        (["tabel"], "invalid choice: 'tabel'"),
        (["table", "--envs", "0"], "'0' is not a positive integer"),
        (["table", "--preset", "gpu"], "invalid choice: 'gpu'"),
        (["table", "--preset", "pixels"], "invalid choice: 'pixels'"),
        (["table", "--units", "a,b"], "'a,b' is not a comma-separated list"),
        (["table", "--units", "8,0"], "every layer size must be >= 1"),
        (["table", "--minibatch", "3"], "does not divide"),
        (["table", "--rows", "nope"], "unknown row nope"),
        (["table", "--task", "Cartpole"], "--task needs --replay"),
        (["table", "--quick", "--preset", "cpu"], "argument --preset: not allowed with argument --quick"),
        (["table", "--seeds", "3"], "unrecognized arguments: --seeds 3"),
        (["table", "--train-args", "num_envs=8"], "unrecognized arguments: --train-args"),
        (["quality", "--replay", "4"], "unrecognized arguments: --replay 4"),
        (["quality", "--tasks", "Cartpol"], "unknown task 'Cartpol'"),
        (["pixels", "--minibatch", "3"], "--minibatch 3 does not divide envs x horizon = 128"),
        (["pixels", "--rows", "all"], "unrecognized arguments: --rows all"),
        (["soak", "--iterations", "0"], "argument --iterations: '0' is not an integer >= 1"),
        (["coldstart", "--units", "8"], "unrecognized arguments: --units 8"),
    ],
)
def test_bad_arguments_print_one_line_and_exit_2(args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("omni_sfp.bench: error: ") and expected in err and err.count("\n") == 1


def test_the_table_offers_every_preset_of_the_configs():
    table = next(a for a in build_parser()._subparsers._group_actions[0].choices.values() if a.prog.endswith("table"))
    preset = next(action for action in table._actions if action.dest == "preset")
    assert list(preset.choices) == list(PRESETS)


def test_the_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("table", "quality", "pixels", "gpu", "soak", "coldstart", "env-overhead"):
        assert f"\n    {command}" in out, command


@pytest.mark.slow
def test_the_command_itself_exits_2_on_a_bad_argument():
    result = subprocess.run(
        [sys.executable, "-m", "omni_sfp.bench", "table", "--repetitions", "-1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == "omni_sfp.bench: error: argument --repetitions: '-1' is not a positive integer"


def test_work_rejects_a_rollout_that_does_not_split_into_minibatches():
    with pytest.raises(ValueError, match="does not divide"):
        Work(
            units=(8,), num_envs=3, horizon=5, updates=1, warmup_updates=1, epochs=1, minibatch_size=4, episode_length=5
        ).check()


def test_the_kernels_column_names_each_rows_choices_and_says_when_repetitions_differed():
    one = {"elu_no_grad": "fast", "elu_autograd": "torch", "allocator": "keep_freed", "fused_adam": True, "threads": 2}
    other = {**one, "threads": 1, "fused_adam": False}
    assert (
        report.kernels_note([{"kernels": {"choices": one}}] * 2) == "ELU fast/torch, keep_freed, fused Adam, 2 threads"
    )
    assert report.kernels_note([{"kernels": {"choices": one}}, {"kernels": {"choices": other}}]).startswith(
        "varied: ELU fast/torch, keep_freed, Adam loop, 1 thread; "
    )
    assert report.kernels_note([{}]) == ""  # the ceiling: bare matrix products, no choices


def test_the_floor_clips_every_step_with_the_works_clip_and_draws_new_advantages_each_update(monkeypatch):
    """The floor does the same learning as the rows: their gradient-norm clip on every Adam step. And its
    advantages are new each update: on one fixed batch its weights grew without bound until subnormal numbers
    slowed it (omni_sfp/bench/floor.py)."""
    import omni_sfp.bench.floor as floor

    clips, advantages = [], []
    real_step = floor.clip_and_step

    def spy(optimizer, parameters, clip, scaler=None):
        clips.append(clip)
        real_step(optimizer, parameters, clip, scaler)

    real_randn = torch.randn

    def keep_advantages(*size, **kwargs):
        tensor = real_randn(*size, **kwargs)
        if tuple(size) == (QUICK.batch_size, 1) and len(advantages) < 1:
            advantages.append(tensor)  # the first (batch, 1) draw: the advantages
        return tensor

    monkeypatch.setattr(floor, "clip_and_step", spy)
    monkeypatch.setattr(floor.torch, "randn", keep_advantages)
    env = make_bench_env(QUICK, device="cpu", seed=0)
    seen = []
    floor.run_floor(env, QUICK, ROWS["floor-fp32"], on_update=lambda: seen.append(advantages[0].clone()))
    assert clips == [QUICK.grad_norm_clip] * (QUICK.total_updates * QUICK.epochs * QUICK.mini_batches)
    assert len(seen) == QUICK.total_updates and not any(torch.equal(a, b) for a, b in zip(seen, seen[1:]))


def test_bare_ppo_does_the_rows_learning_steps_every_env_step_and_clips_every_minibatch(monkeypatch):
    """The bare-torch PPO row does the work the floor leaves out (omni_sfp/bench/bare_ppo.py): it steps the env
    ``horizon`` times an update, with actions drawn around the policy's means, and takes every minibatch's Adam
    step with the work's gradient-norm clip."""
    import omni_sfp.bench.bare_ppo as bare

    clips, actions = [], []
    real_step = bare.clip_and_step

    def spy(optimizer, parameters, clip, scaler=None):
        clips.append(clip)
        real_step(optimizer, parameters, clip, scaler)

    monkeypatch.setattr(bare, "clip_and_step", spy)
    env = make_bench_env(QUICK, device="cpu", seed=0)
    real_env_step = env.step
    env.step = lambda a: (actions.append(a.clone()), real_env_step(a))[1]
    updates = []
    info = bare.run_bare_ppo(env, QUICK, ROWS["bare-ppo-fp32"], on_update=lambda: updates.append(len(actions)))
    assert updates == [QUICK.horizon * (i + 1) for i in range(QUICK.total_updates)]
    assert clips == [QUICK.grad_norm_clip] * (QUICK.total_updates * QUICK.epochs * QUICK.mini_batches)
    assert all(a.shape == (QUICK.num_envs, env.action_space.shape[0]) and torch.isfinite(a).all() for a in actions)
    assert not torch.equal(actions[0], actions[1])  # sampled, not the means
    assert info["kernels"]["choices"]["threads"] == torch.get_num_threads()


@pytest.mark.slow
def test_bare_ppo_learns_cartpole():
    """A reference row is only a reference if it trains: bare PPO on the cartpole preset's work balances the pole
    for longer and longer episodes (random actions: about 22 steps)."""
    from skrl.utils import set_seed

    import omni_sfp.bench.bare_ppo as bare

    work = PRESETS["cartpole"][0].replace(updates=24, num_envs=256, minibatch_size=4096)
    set_seed(0)
    env = make_bench_env(work, device="cpu", seed=0)
    ends = []
    real_env_step = env.step

    def step(actions):
        result = real_env_step(actions)
        ends.append(int((result[2] | result[3]).sum()))
        return result

    env.step = step
    bare.run_bare_ppo(env, work, ROWS["bare-ppo-fp32"], on_update=lambda: None)
    per_update = [sum(ends[i : i + work.horizon]) for i in range(0, len(ends), work.horizon)]
    first, last = (work.batch_size * 3 / max(sum(part), 1) for part in (per_update[:3], per_update[-3:]))
    assert first < 40 and last > 150, (first, last)


def test_the_isaaclab_preset_is_humanoid_sized_and_scaled_down_on_a_cpu():
    from omni_sfp.bench.configs import preset_work
    from omni_sfp.bench.envs import make_bench_env

    gpu, _ = preset_work("isaaclab", "cuda")
    cpu, _ = preset_work("isaaclab", "cpu")
    for work in (gpu, cpu):
        assert work.units == (400, 200, 100) and (work.observation_size, work.action_size) == (87, 21)
        assert (work.horizon, work.epochs, work.mini_batches) == (32, 5, 4)
    assert gpu.num_envs == 4096 and cpu.num_envs == 256
    env = make_bench_env(cpu, device="cpu", seed=0)
    assert env.observation_space.shape == (87,) and env.action_space.shape == (21,)


def test_soak_runs_as_a_command_and_finds_no_graph_kept(tmp_path, capsys):
    out = tmp_path / "soak.json"
    small = ["num_envs=8", "train.models.units=[8]", "train.ppo.rollouts=4", "train.ppo.mini_batches=2"]
    assert main(["soak", "--iterations", "3", "--warmup", "1", "--out", str(out), *small]) == 0
    result = json.loads(out.read_text())
    assert [s["iteration"] for s in result["samples"]] == [1, 2, 3]
    assert result["summary"]["cache_entries_with_graph"] == 0 and result["summary"]["sfp_share_rate"] == 1.0
    assert "[soak] RSS" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_hands_its_arguments_to_the_gpu_script(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["gpu", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("omni_sfp.bench.gpu: error: --device cuda: CUDA is not available")
