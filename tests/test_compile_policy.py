"""``train.models.compile`` and ``train.capture``: true, false or auto; auto's decision (hand-made costs, each side
of the pay-back line), and the runner deciding after its first eager iterations, then training on compiled."""

import os
import shutil

import pytest
import torch
from gymnasium.spaces import Box, Discrete
from omegaconf import OmegaConf

from omni_sfp.compute.compile_policy import (
    CAPTURE_COSTS,
    MEASURED,
    CompileCost,
    compile_trunk,
    decide_compile,
    is_compiled,
)
from omni_sfp.config import schema
from omni_sfp.ppo.loop import Progress
from omni_sfp.run.compose import ConfigError, load_config
from omni_sfp.run.runner import Runner, model_trunks
from omni_sfp.sfp import network
from omni_sfp.sfp.models import SharedActorCritic, build_models, mlp_models, trunks

COST = CompileCost(compile_s=20.0, saving=0.10, source="hand-made")


def test_auto_compiles_exactly_when_the_saving_over_the_run_exceeds_the_compile_cost():
    # 100 iterations x 2.5 s x 10% = 25 s > 20 s; 80 x 2.5 x 10% = 20 s is not more than 20 s
    yes = decide_compile(
        "auto", iterations_left=100, iteration_s=2.5, device_type="cpu", mixed_precision=True, cost=COST
    )
    no = decide_compile("auto", iterations_left=80, iteration_s=2.5, device_type="cpu", mixed_precision=True, cost=COST)
    assert yes.compile and "25.0 s > 20.0 s" in yes.reason and "\n" not in yes.reason
    assert not no.compile and "20.0 s <= 20.0 s" in no.reason


def test_explicit_settings_and_unmeasured_devices():
    assert decide_compile(True, iterations_left=1, iteration_s=0.1, device_type="cpu", mixed_precision=False).compile
    assert not decide_compile(
        False, iterations_left=10**6, iteration_s=9.0, device_type="cpu", mixed_precision=True
    ).compile
    cuda = decide_compile("auto", iterations_left=10**6, iteration_s=9.0, device_type="cuda", mixed_precision=True)
    assert not cuda.compile and "no measured compile cost for cuda" in cuda.reason
    measured = MEASURED["cpu", True]
    long_run = decide_compile("auto", iterations_left=10**4, iteration_s=1.0, device_type="cpu", mixed_precision=True)
    assert long_run.compile and measured.source in long_run.reason
    with pytest.raises(ValueError, match="must be true, false or auto"):
        decide_compile("sometimes", iterations_left=1, iteration_s=1.0, device_type="cpu", mixed_precision=False)
    with pytest.raises(ValueError, match="must not be negative"):
        decide_compile("auto", iterations_left=-1, iteration_s=1.0, device_type="cpu", mixed_precision=False)


CAMERA = {
    "separate": False,
    "policy": {
        "class": "CategoricalMixin",
        "network": [
            {"name": "cnn", "input": "OBSERVATIONS", "layers": [{"conv2d": [4, 3]}, "flatten"], "activations": "relu"},
            {"name": "net", "input": "cnn", "layers": [8], "activations": "elu"},
        ],
        "output": "ACTIONS",
    },
    "value": {"class": "DeterministicMixin", "network": "same", "output": "ONE"},
}
CAMERA["value"]["network"] = CAMERA["policy"]["network"]
RECURRENT = {
    **network.mlp_spec([8]),
    "rnn": {"class": "GRU", "hidden_size": 4, "sequence_length": 2},
}


def every_kind_of_model():
    """The tuned MLP (shared and separate), a CNN with a Categorical policy, a recurrent trunk: one builder."""
    box = Box(-1, 1, (3,))
    yield "mlp", {"policy": SharedActorCritic(box, Box(-1, 1, (2,)), "cpu", units=(8,))}
    yield "separate", mlp_models(box, Box(-1, 1, (2,)), "cpu", units=(8,), separate=True)
    yield "cnn", build_models(network.parse(CAMERA), Box(0, 1, (1, 6, 6)), Discrete(3), "cpu")
    yield "rnn", build_models(network.parse(RECURRENT), box, Box(-1, 1, (2,)), "cpu", num_envs=2)


@pytest.mark.parametrize("kind", ["mlp", "separate", "cnn", "rnn"])
def test_compile_trunk_compiles_every_networks_trunks_in_place_and_keeps_their_parameter_names(kind):
    models = dict(every_kind_of_model())[kind]
    names = {role: list(model.state_dict()) for role, model in models.items()}
    networks = model_trunks(models)
    assert len(networks) == (2 if kind == "separate" else 1)
    for trunk in networks:
        compile_trunk(trunk)  # torch.compile is lazy: nothing is compiled until the first call
    assert all(is_compiled(trunk) for model in models.values() for trunk in trunks(model))
    assert {role: list(model.state_dict()) for role, model in models.items()} == names  # no "_orig_mod."
    with pytest.raises(TypeError, match="not a module"):
        compile_trunk(lambda x: x)


def test_a_copy_of_a_compiled_network_runs_its_own_parameters_and_export_takes_the_eager_forward():
    import copy

    from omni_sfp.run.outputs.export import deployed_policy

    model = SharedActorCritic(Box(-1, 1, (3,)), Box(-1, 1, (2,)), "cpu", units=(8,))
    (trunk,) = trunks(model)
    compile_trunk(trunk)
    twin = copy.deepcopy(trunk)
    assert twin.forward.__self__ is twin and twin.blocks["net"][0].weight is not model.layers[0].weight
    deployed = deployed_policy(model, None, Box(-1, 1, (2,)))
    assert not any(is_compiled(module) for module in deployed.modules())
    assert is_compiled(trunk)  # the model itself keeps its compiled forward
    x = torch.randn(5, 3)
    with torch.no_grad():
        torch.testing.assert_close(deployed(x), model.policy_head(model.trunk.trunk(x)))


# ---- the setting: validation (Hydra gives a bool for true/false, a str for auto) --------------------------------
@pytest.mark.parametrize("text, value", [("true", True), ("false", False), ("auto", "auto")])
def test_validation_takes_true_false_and_auto(text, value):
    assert load_config([f"train.models.compile={text}"]).train.models.compile == value


def test_auto_is_the_default():
    assert load_config([]).train.models.compile == "auto" == schema.setting("train.models.compile").default


@pytest.mark.parametrize(
    "text, shown", [("sometimes", "'sometimes'"), ("1", "1"), ("'true'", "'true'"), ("[auto]", "['auto']")]
)
def test_other_values_are_one_line_naming_what_is_allowed(text, shown):
    with pytest.raises(ConfigError) as error:
        load_config([f"train.models.compile={text}"])
    assert str(error.value) == f"train.models.compile={shown}: must be true, false or auto"


# ---- the runner: auto decides after the first eager iterations ---------------------------------------------------
def runner_for(tmp_path, *overrides):
    """A runner whose trunk compile decides (train.capture=false: nothing captures the step, which would compile the
    trunk with it)."""
    config = ["device=cpu", f"runs_dir={tmp_path}", "train.capture=false", *overrides]
    return Runner(load_config(config), disable_progressbar=True)


def progress(iteration, seconds):
    return Progress(
        iteration=iteration,
        timestep=0,
        sps=0.0,
        mean_return=None,
        mean_length=None,
        sfp_hit_rate=1.0,
        rollout_s=seconds / 4,
        update_s=3 * seconds / 4,
    )


def test_the_default_cartpole_run_decides_eager_after_two_iterations_and_says_why_once(tmp_path, capsys):
    runner = runner_for(tmp_path, "max_iterations=3")
    summary = runner.train()
    lines = [line for line in capsys.readouterr().out.splitlines() if "train.models.compile" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "[omni_sfp] iteration 2: train.models.compile=auto: eager, 1 iterations x "
    ), lines
    second, cost = summary.history[1], MEASURED["cpu", runner.cfg.train.mixed_precision]
    assert f"{second.rollout_s + second.update_s:.2f} s x {100 * cost.saving:.1f}% saved" in lines[0]
    assert runner.auto_compile.decision.compile is False and runner.auto_compile.iteration == 2
    assert not any(is_compiled(trunk) for trunk in model_trunks(runner.models))
    notes = (runner.run_dir / "notes.txt").read_text().splitlines()
    assert notes == [runner.cpu_choices.line(), lines[0]]  # the start's CPU choices, then the decision


@pytest.mark.parametrize("separate", [False, True])
def test_auto_compiles_every_network_when_the_run_pays_it_back(tmp_path, capsys, monkeypatch, separate):
    monkeypatch.setitem(MEASURED, ("cpu", False), COST)
    runner = runner_for(tmp_path, "max_iterations=302", f"train.models.separate={str(separate).lower()}")
    tune = runner.learner.tune
    tune(progress(1, 9.0))  # the first iteration is not measured
    assert tune.decision is None
    tune(progress(2, 1.0))  # 300 x 1 s x 10% = 30 s > 20 s
    assert (
        tune.decision.compile
        and "compiling, 300 iterations x 1.00 s x 10.0% saved = 30.0 s > 20.0 s" in capsys.readouterr().out
    )
    networks = model_trunks(runner.models)
    assert len(networks) == (2 if separate else 1) and all(is_compiled(network) for network in networks)
    tune(progress(3, 1.0))  # decided once
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("compiled_s", "kept"), [(0.80, True), (0.97, False), (1.20, False)])
def test_the_compiled_trunk_stays_only_when_its_iteration_is_measured_clearly_faster(
    tmp_path, capsys, monkeypatch, compiled_s, kept
):
    monkeypatch.setitem(MEASURED, ("cpu", False), COST)  # the table says compiling pays
    runner = runner_for(tmp_path, "max_iterations=302")
    tune, (network,) = runner.learner.tune, model_trunks(runner.models)
    tune(progress(1, 9.0))
    tune(progress(2, 1.0))  # decided: compile
    assert tune.decision.compile and is_compiled(network)
    capsys.readouterr()
    tune(progress(3, 25.0))  # the first compiled iteration pays the compile: not the measurement
    assert tune.kept is None and is_compiled(network) and capsys.readouterr().out == ""
    tune(progress(4, compiled_s))
    assert tune.kept is kept and is_compiled(network) is kept
    line = capsys.readouterr().out.strip()
    assert line.startswith(
        f"[omni_sfp] iteration 4: train.models.compile=auto measured: {compiled_s:.2f} s an iteration compiled "
        "against 1.00 s eager"
    )
    assert line.endswith("compiled trunk kept" if kept else "back to eager (a gain under 5% is noise)")
    tune(progress(5, 0.5))  # checked once
    assert capsys.readouterr().out == "" and is_compiled(network) is kept


def test_a_run_shorter_than_the_eager_iterations_is_decided_at_its_end(tmp_path, capsys):
    runner = runner_for(tmp_path, "max_iterations=1")
    runner.learner.tune(progress(1, 1.0))
    assert not runner.auto_compile.decision.compile and "eager, 0 iterations" in capsys.readouterr().out


def test_true_compiles_before_training_and_false_never(tmp_path):
    assert all(map(is_compiled, model_trunks(runner_for(tmp_path, "train.models.compile=true").models)))
    never = runner_for(tmp_path, "train.models.compile=false")
    assert never.learner.tune is None and not any(map(is_compiled, model_trunks(never.models)))


def _has_cpp_compiler() -> bool:
    return any(shutil.which(name) for name in (os.environ.get("CXX", "g++"), "g++", "clang++"))


@pytest.mark.slow
@pytest.mark.skipif(not _has_cpp_compiler(), reason="inductor compiles C++ on CPU: no g++ or clang++ here")
def test_a_run_compiled_by_auto_trains_on_with_every_trunk_call_a_cache_hit_and_resumes_eager(
    tmp_path, capsys, monkeypatch
):
    import torch._dynamo

    monkeypatch.setitem(MEASURED, ("cpu", False), CompileCost(compile_s=0.0, saving=0.5, source="hand-made"))
    small = [
        "num_envs=16",
        "train.models.units=[16,16]",
        "train.ppo.rollouts=4",
        "train.ppo.mini_batches=2",
        "train.ppo.learning_epochs=2",
    ]
    runner = runner_for(tmp_path, *small, "max_iterations=4")
    frames = torch._dynamo.utils.counters["frames"]["ok"]
    summary = runner.train()
    assert runner.auto_compile.decision.compile and runner.auto_compile.iteration == 2
    assert "iteration 2: train.models.compile=auto: compiling, 2 iterations x" in capsys.readouterr().out
    assert torch._dynamo.utils.counters["frames"]["ok"] > frames  # iterations 3 and 4 ran the compiled trunk
    assert summary.iterations == 4 and summary.sfp_hit_rate == 1.0
    assert all(p.sfp_hit_rate == 1.0 for p in summary.history)
    # its checkpoint holds the eager names: an eager run resumes it
    eager = runner_for(
        tmp_path, *small, "train.models.compile=false", "max_iterations=6", f"checkpoint={summary.checkpoint}"
    )
    eager.load_state_dict(eager._resume_state, source=summary.checkpoint)
    trained = runner.models["policy"].state_dict()
    assert all(torch.equal(value, trained[name]) for name, value in eager.models["policy"].state_dict().items())


def test_auto_stays_eager_on_cpu_without_a_cpp_compiler(monkeypatch):
    """Inductor needs a C++ compiler on CPU: auto must not pick a compile that would fail mid-run."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    decision = decide_compile(
        "auto", iterations_left=10**6, iteration_s=9.0, device_type="cpu", mixed_precision=True, cost=COST
    )
    assert not decision.compile and "no C++ compiler" in decision.reason
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert not decide_compile(
        "auto", iterations_left=10**6, iteration_s=9.0, device_type="cpu", mixed_precision=True, cost=COST
    ).compile
    cuda = decide_compile(
        "auto", iterations_left=10**6, iteration_s=9.0, device_type="cuda", mixed_precision=True, cost=COST
    )
    assert cuda.compile  # on CUDA inductor writes Triton kernels: no host compiler question


# -- train.capture=auto: the same measured switch over the whole minibatch step -------------------------------------
def capture_runner(tmp_path, *overrides):
    return Runner(load_config(["device=cpu", f"runs_dir={tmp_path}", *overrides]), disable_progressbar=True)


def saved_capture(runner) -> object:
    return OmegaConf.load(runner.run_dir / "config.yaml").train.capture


def test_the_default_run_decides_its_capture_after_two_iterations_says_why_and_keeps_it_in_config_yaml(
    tmp_path, capsys
):
    runner = capture_runner(tmp_path, "max_iterations=3")
    assert runner.learner.tune is runner.auto_capture and runner.auto_compile is None
    assert saved_capture(runner) == "auto"
    runner.train()
    lines = [line for line in capsys.readouterr().out.splitlines() if "train.capture" in line]
    assert len(lines) == 1 and lines[0].startswith("[omni_sfp] iteration 2: train.capture=auto: eager, "), lines
    assert runner.agent.capture == "off" and saved_capture(runner) is False


@pytest.mark.parametrize(("captured_s", "kept"), [(0.80, True), (0.97, False)])
def test_auto_captures_when_it_pays_and_keeps_it_only_when_measured_faster(
    tmp_path, capsys, monkeypatch, captured_s, kept
):
    monkeypatch.setitem(CAPTURE_COSTS, ("cpu", False), COST)
    runner = capture_runner(tmp_path, "max_iterations=302")
    tune = runner.learner.tune
    tune(progress(1, 9.0))
    tune(progress(2, 1.0))  # 300 x 1 s x 10% = 30 s > 20 s
    assert tune.decision.compile and runner.agent.capture == "compile"
    assert "train.capture=auto: compiling, 300 iterations x 1.00 s x 10.0% saved" in capsys.readouterr().out
    tune(progress(3, 25.0))  # pays the compile
    tune(progress(4, captured_s))
    assert tune.kept is kept and runner.agent.capture == ("compile" if kept else "off")
    assert ("captured step kept" if kept else "back to eager") in capsys.readouterr().out
    assert saved_capture(runner) is kept


def test_a_step_that_cannot_be_captured_leaves_auto_to_the_trunk_compile(tmp_path):
    runner = capture_runner(tmp_path, "max_iterations=3", "train.ppo.kl_threshold=0.05")
    assert runner.auto_capture is None and runner.learner.tune is runner.auto_compile


def test_true_captures_before_training_and_false_never_decides(tmp_path):
    assert capture_runner(tmp_path, "max_iterations=3", "train.capture=true").agent.capture == "compile"
    runner = capture_runner(tmp_path, "max_iterations=3", "train.capture=false")
    assert runner.agent.capture == "off" and runner.auto_capture is None
