"""omni_sfp.compute.cpu_choices: the CPU speed choices, measured once per CPU kind, cached, forced either way, and the
arithmetic within docs/reliability.md's bounds whichever side runs."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
import torch
import yaml

from omni_sfp.compute import cpu_choices
from omni_sfp.compute.cpu_choices import CPUChoices, Settings, apply, cpu_key, interleaved, pick, resolve
from omni_sfp.compute.kernels import elu_kernels, use_elu_kernels
from omni_sfp.run.compose import load_config
from omni_sfp.sfp.models import SharedActorCritic

CPU = torch.device("cpu")
FP32_GRADIENT_BOUND = 1e-5  # docs/reliability.md: gradients within 1e-5 * max|g| in fp32
ELU_BOUND = 2**-23  # omni_sfp.compute.kernels.fast_elu: within 2**-23 of torch's ELU
FORCED = Settings(elu_no_grad="torch", elu_autograd="torch", allocator="keep_freed", fused_adam=True, threads=1)


@pytest.fixture(autouse=True)
def _restore_process_choices():
    """The choices are process-wide (as torch's thread count): every test leaves them as it found them."""
    kernels, threads, current = elu_kernels(), torch.get_num_threads(), cpu_choices._current
    yield
    use_elu_kernels(**kernels)
    torch.set_num_threads(threads)
    cpu_choices._current = current


def fake_cpu(name: str, flags: tuple[str, ...] = ("avx2", "fma")):
    return lambda: {"model": name, "family": "25", "model_number": "1", "stepping": "1", "flags": sorted(flags)}


def counting(monkeypatch, name: str) -> list[int]:
    """Count the calls of the real measurement ``name`` (it still runs)."""
    calls: list[int] = []
    real = getattr(cpu_choices, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_choices, name, counted)
    return calls


# -- the decision rule ----------------------------------------------------------------------------------------
def test_the_default_side_keeps_its_place_unless_the_other_wins_by_the_margin():
    assert pick({"torch": 1.0, "fast": 0.96}, "torch", "fast") == "torch"  # 4% faster: noise, not a win
    assert pick({"torch": 1.0, "fast": 0.90}, "torch", "fast") == "fast"
    assert pick({"torch": 0.90, "fast": 1.0}, "torch", "fast") == "torch"


def test_candidates_are_interleaved_and_each_time_is_a_median():
    order: list[str] = []
    timings = interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=4, calls=1)
    assert order == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b", "b", "a"]  # 2 untimed pairs, then A B / B A
    assert set(timings) == {"a", "b"} and all(t > 0 for t in timings.values())


# -- the cache --------------------------------------------------------------------------------------------------
def test_the_cache_lives_under_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cpu_choices.cache_path() == tmp_path / "omni-sfp" / "cpu-choices.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cpu_choices.cache_path() == tmp_path / "home" / ".cache" / "omni-sfp" / "cpu-choices.json"


def test_the_probe_is_cached_reused_and_redone_for_another_cpu(monkeypatch, tmp_path):
    cache = tmp_path / "cpu-choices.json"
    settings = Settings(allocator="keep_freed", threads=1)  # the allocator probe is once per process (mallopt)
    elu_calls, adam_calls = counting(monkeypatch, "measure_elu_autograd"), counting(monkeypatch, "measure_adam")
    monkeypatch.setattr(cpu_choices, "cpu_identity", fake_cpu("Zen 3 EPYC"))

    first = resolve(settings, CPU, mixed_precision=False, cache=cache)
    assert first.sources["elu_autograd"] == first.sources["fused_adam"] == "measured"
    assert first.sources["allocator"] == first.sources["threads"] == "forced"
    assert first.probe_s is not None and first.probe_s < 2.0  # the probe's budget: well under a second, quiet
    assert {"torch", "fast"} == set(first.timings["elu_no_grad"]) == set(first.timings["elu_autograd"])
    assert (len(elu_calls), len(adam_calls)) == (1, 1)

    again = resolve(settings, CPU, mixed_precision=False, cache=cache)
    assert again.as_dict() == first.as_dict() and again.probe_s is None
    assert {again.sources[n] for n in ("elu_no_grad", "elu_autograd", "fused_adam")} == {"cached"}
    assert (len(elu_calls), len(adam_calls)) == (1, 1)  # nothing measured again

    monkeypatch.setattr(cpu_choices, "cpu_identity", fake_cpu("Zen 3 EPYC", ("avx2", "avx512f", "fma")))
    other = resolve(settings, CPU, mixed_precision=False, cache=cache)  # same name, other flags: another kind
    assert other.sources["elu_autograd"] == "measured" and (len(elu_calls), len(adam_calls)) == (2, 2)
    assert other.key != first.key and "avx512f" in other.key
    resolve(settings, CPU, mixed_precision=True, cache=cache)  # bf16: another key, Adam measured again
    assert len(adam_calls) == 3

    entries = json.loads(cache.read_text())["entries"]  # one valid file, written whole
    assert set(entries) == {
        first.key,
        other.key,
        cpu_key("bfloat16 autocast", fake_cpu("Zen 3 EPYC", ("avx2", "avx512f", "fma"))()),
    }
    assert entries[first.key]["choices"] == {
        n: first.as_dict()[n] for n in ("elu_no_grad", "elu_autograd", "fused_adam")
    }
    assert [p.name for p in tmp_path.iterdir()] == ["cpu-choices.json"]  # no temporary file left behind


def test_a_probe_of_one_choice_keeps_the_others_cached(monkeypatch, tmp_path):
    cache = tmp_path / "cpu-choices.json"
    monkeypatch.setattr(cpu_choices, "cpu_identity", fake_cpu("Xeon"))
    only_adam = Settings(elu_no_grad="torch", elu_autograd="fast", allocator="glibc", threads=1)
    resolve(only_adam, CPU, mixed_precision=False, cache=cache)
    resolve(Settings(elu_autograd="fast", allocator="glibc", threads=1), CPU, mixed_precision=False, cache=cache)
    choices = json.loads(cache.read_text())["entries"][cpu_key("float32", fake_cpu("Xeon")())]["choices"]
    assert set(choices) == {"fused_adam", "elu_no_grad"}


def test_an_unreadable_cache_is_measured_again_and_replaced(monkeypatch, tmp_path):
    cache = tmp_path / "cpu-choices.json"
    cache.write_text("{ half a file")
    monkeypatch.setattr(cpu_choices, "cpu_identity", fake_cpu("laptop"))
    choices = resolve(Settings(allocator="glibc", threads=1), CPU, mixed_precision=False, cache=cache)
    assert choices.sources["fused_adam"] == "measured"
    assert json.loads(cache.read_text())["version"] == cpu_choices.CACHE_VERSION


def test_forced_settings_measure_nothing_and_other_devices_take_the_defaults(monkeypatch, tmp_path):
    calls = counting(monkeypatch, "_measure")
    forced = resolve(FORCED, CPU, mixed_precision=False, cache=tmp_path / "c.json")
    assert set(forced.sources.values()) == {"forced"} and not calls and not (tmp_path / "c.json").exists()
    cuda = resolve(Settings(), torch.device("cuda"), mixed_precision=False, cache=tmp_path / "c.json")
    assert not calls and cuda.fused_adam is True and cuda.elu_no_grad == "torch"
    assert all(source.startswith("default") for source in cuda.sources.values())
    monkeypatch.setenv("WORLD_SIZE", "2")  # the ranks would time each other: the defaults, the same on each
    ranks = resolve(Settings(), CPU, mixed_precision=False, cache=tmp_path / "c.json")
    assert not calls and "multi-process" in ranks.sources["elu_autograd"]


def test_the_line_names_every_choice_its_source_and_the_figures(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_choices, "cpu_identity", fake_cpu("Zen 5 EPYC", ("avx512f", "avx512_bf16")))
    choices = resolve(Settings(allocator="glibc", threads=2), CPU, mixed_precision=False, cache=tmp_path / "c.json")
    line = choices.line()
    assert line.startswith("[omni_sfp] CPU choices for Zen 5 EPYC (25/1/1) [avx512f avx512_bf16; flags ")
    assert "\n" not in line and "allocator=glibc (forced)" in line and "threads=2 (forced)" in line
    assert f"elu_autograd={choices.elu_autograd} (measured: torch " in line and "probe " in line


# -- the run: applied, printed, kept in config.yaml ---------------------------------------------------------------
def test_a_run_prints_its_choices_and_keeps_them_in_config_yaml(tmp_path, capsys):
    from omni_sfp.run.runner import Runner

    cfg = load_config(
        [
            "task=Cartpole",
            "num_envs=16",
            "max_iterations=1",
            "train.models.units=[16]",
            "train.ppo.rollouts=4",
            "train.ppo.mini_batches=2",
            "train.kernels.elu_autograd=fast",
            f"runs_dir={tmp_path}",
        ]
    )
    runner = Runner(cfg, disable_progressbar=True)
    assert elu_kernels()["autograd"] == "fast" and runner.cpu_choices.sources["elu_autograd"] == "forced"
    assert torch.get_num_threads() == runner.cpu_choices.threads
    saved = yaml.safe_load((runner.run_dir / "config.yaml").read_text())["train"]
    assert saved["kernels"] == {k: v for k, v in runner.cpu_choices.as_dict().items() if k != "fused_adam"}
    assert saved["ppo"]["fused_optimizer"] is runner.cpu_choices.fused_adam
    assert bool(runner.agent.optimizer.defaults.get("fused")) is runner.cpu_choices.fused_adam
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[omni_sfp] CPU choices")]
    assert printed == [runner.cpu_choices.line()]
    assert printed[0] in (runner.run_dir / "notes.txt").read_text()


# -- the arithmetic, whichever side is forced ---------------------------------------------------------------------
def outputs_and_gradients(model: SharedActorCritic, observations: torch.Tensor):
    with torch.no_grad():  # the rollout's path
        rollout_mean = model.act({"observations": observations}, role="policy")[1]["mean_actions"]
    model.zero_grad(set_to_none=True)
    _, outputs = model.act({"observations": observations}, role="policy")  # the update's path
    values, _ = model.act({"observations": observations}, role="value")
    (outputs["mean_actions"].square().sum() + values.sum() + outputs["log_std"].sum()).backward()
    return rollout_mean, outputs["mean_actions"].detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("no_grad", ["torch", "fast"])
@pytest.mark.parametrize("autograd", ["torch", "fast"])
def test_each_elu_kernel_keeps_outputs_and_gradients_within_the_bounds(no_grad, autograd):
    torch.manual_seed(0)
    space = gymnasium.spaces.Box(-np.inf, np.inf, (24,))
    model = SharedActorCritic(space, gymnasium.spaces.Box(-1.0, 1.0, (4,)), "cpu", units=(256, 128, 64))
    observations = 3 * torch.randn(2048, 24)
    use_elu_kernels(no_grad="torch", autograd="torch")
    reference = outputs_and_gradients(model, observations)
    use_elu_kernels(no_grad=no_grad, autograd=autograd)
    rollout, update, gradients = outputs_and_gradients(model, observations)
    # each ELU is off by at most 2**-23 (absolute); through three layers of unit-scale weights the outputs stay
    # well inside the fp32 gradient bound, relative to their largest value
    for ours, theirs in ((rollout, reference[0]), (update, reference[1])):
        assert (ours - theirs).abs().max() <= FP32_GRADIENT_BOUND * theirs.abs().max()
    for ours, theirs in zip(gradients, reference[2]):
        assert (ours - theirs).abs().max() <= FP32_GRADIENT_BOUND * theirs.abs().max()
    kernel_ran = (no_grad, autograd) != ("torch", "torch")
    assert kernel_ran == (not (torch.equal(rollout, reference[0]) and torch.equal(update, reference[1])))


@pytest.mark.parametrize("threads", [1, 2])
def test_each_thread_count_keeps_gradients_within_the_bound(threads):
    torch.manual_seed(0)
    space = gymnasium.spaces.Box(-np.inf, np.inf, (24,))
    model = SharedActorCritic(space, gymnasium.spaces.Box(-1.0, 1.0, (4,)), "cpu", units=(256, 128, 64))
    observations = torch.randn(4096, 24)
    torch.set_num_threads(1)
    reference = outputs_and_gradients(model, observations)
    torch.set_num_threads(threads)
    ours = outputs_and_gradients(model, observations)
    for mine, theirs in zip([ours[0], ours[1], *ours[2]], [reference[0], reference[1], *reference[2]]):
        assert (mine - theirs).abs().max() <= FP32_GRADIENT_BOUND * theirs.abs().max()


def test_each_adam_side_moves_parameters_alike():
    """One step of fused Adam (the clip as its ``grad_scale``) against the loop after ``clip_grad_norm_``, as the
    agent takes them, the clip active. The bound is tests/test_agent.py's (there through the whole update): at
    Adam's first step each update is at most ``lr``; the two order the same formula differently, a few roundings
    of 2**-24 of it (16 allowed), plus one rounding of the parameter."""
    lr, sides = 1e-3, []
    for fused in (True, False):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.ELU(), torch.nn.Linear(64, 4))
        before = torch.cat([p.detach().flatten() for p in net.parameters()])
        optimizer = torch.optim.Adam(net.parameters(), lr=lr, fused=fused)
        net(torch.randn(256, 24, generator=torch.Generator().manual_seed(1))).square().sum().backward()
        if fused:
            norm = torch.nn.utils.get_total_norm([p.grad for p in net.parameters()])
            optimizer.grad_scale = torch.clamp((norm + 1e-6) / 1e-3, min=1.0)
            optimizer.step()
            del optimizer.grad_scale
        else:
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1e-3)
            optimizer.step()
        sides.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    fused, loop = sides
    bound = 16 * 2**-24 * lr + torch.finfo(torch.float32).eps * loop.abs()
    assert (fused - loop).abs().le(bound).all(), (fused - loop).abs().max()
    assert (loop - before).abs().max() > 100 * bound.max()  # the step itself is far above the bound


# the allocator changes where memory comes from, never a value: two processes, each side, the same bits
STEPS = """
import sys, torch
from omni_sfp.compute.cpu_choices import Settings, apply, resolve
choices = resolve(Settings(elu_no_grad="torch", elu_autograd="torch", allocator=sys.argv[1], fused_adam=True,
                           threads=1), torch.device("cpu"), mixed_precision=False)
apply(choices, torch.device("cpu"))
from omni_sfp.compute.device import malloc_tuned
torch.manual_seed(0)
from omni_sfp.sfp.network import make_mlp
net = make_mlp(8, (256, 128))
optimizer = torch.optim.Adam(net.parameters(), fused=True)
for step in range(3):
    optimizer.zero_grad()
    net(torch.randn(4096, 8)).square().mean().backward()
    optimizer.step()
print(malloc_tuned(), torch.cat([p.detach().flatten() for p in net.parameters()]).double().sum().item())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_each_allocator_side_computes_the_same_bits():
    runs = [
        subprocess.run([sys.executable, "-c", STEPS, side], capture_output=True, text=True, check=True).stdout.split()
        for side in ("keep_freed", "glibc")
    ]
    assert [run[0] for run in runs] == ["True", "False"]  # each side ran as forced
    assert runs[0][1] == runs[1][1]


def test_apply_sets_the_process_wide_choices():
    choices = resolve(FORCED, CPU, mixed_precision=False)
    apply(CPUChoices(**{**choices.as_dict(), "elu_no_grad": "fast"}, sources=choices.sources), CPU)
    assert elu_kernels() == {"no_grad": "fast", "autograd": "torch"} and torch.get_num_threads() == 1
    assert cpu_choices.current().elu_no_grad == "fast"
