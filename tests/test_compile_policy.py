"""The compile decision of ``train.models.compile: auto``: hand-made costs, each side of the pay-back line."""

import pytest
import torch
from gymnasium.spaces import Box

from omni_sfp.compile_policy import MEASURED, CompileCost, compile_trunk, decide_compile
from omni_sfp.models import SharedActorCritic

COST = CompileCost(compile_s=20.0, saving=0.10, source="hand-made")


def test_auto_compiles_exactly_when_the_saving_over_the_run_exceeds_the_compile_cost():
    # 100 iterations x 2.5 s x 10% = 25 s > 20 s; 80 x 2.5 x 10% = 20 s is not more than 20 s
    yes = decide_compile("auto", iterations_left=100, iteration_s=2.5, device_type="cpu", mixed_precision=True,
                         cost=COST)
    no = decide_compile("auto", iterations_left=80, iteration_s=2.5, device_type="cpu", mixed_precision=True,
                        cost=COST)
    assert yes.compile and "25.0 s > 20.0 s" in yes.reason and "\n" not in yes.reason
    assert not no.compile and "20.0 s <= 20.0 s" in no.reason


def test_explicit_settings_and_unmeasured_devices():
    assert decide_compile(True, iterations_left=1, iteration_s=0.1, device_type="cpu", mixed_precision=False).compile
    assert not decide_compile(False, iterations_left=10**6, iteration_s=9.0, device_type="cpu",
                              mixed_precision=True).compile
    cuda = decide_compile("auto", iterations_left=10**6, iteration_s=9.0, device_type="cuda", mixed_precision=True)
    assert not cuda.compile and "no measured compile cost for cuda" in cuda.reason
    measured = MEASURED["cpu", True]
    long_run = decide_compile("auto", iterations_left=10**4, iteration_s=1.0, device_type="cpu", mixed_precision=True)
    assert long_run.compile and measured.source in long_run.reason
    with pytest.raises(ValueError, match="must be true, false or auto"):
        decide_compile("sometimes", iterations_left=1, iteration_s=1.0, device_type="cpu", mixed_precision=False)
    with pytest.raises(ValueError, match="must not be negative"):
        decide_compile("auto", iterations_left=-1, iteration_s=1.0, device_type="cpu", mixed_precision=False)


def test_compile_trunk_wraps_the_mlp_inside_the_cache_and_keeps_its_parameters():
    model = SharedActorCritic(Box(-1, 1, (3,)), Box(-1, 1, (2,)), "cpu", units=(8,))
    mlp = model.trunk.trunk
    compile_trunk(model)  # torch.compile is lazy: nothing is compiled until the first call
    assert isinstance(model.trunk.trunk, torch._dynamo.eval_frame.OptimizedModule)
    assert model.trunk.trunk._orig_mod is mlp
    with pytest.raises(TypeError, match="no trunk"):
        compile_trunk(torch.nn.Linear(2, 2))
