"""torch is used as shipped: no copy of its private internals, and the cache's step invalidation runs through
torch's own ``Optimizer.step`` and its global step post-hook (``register_optimizer_step_post_hook``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# names of torch internals the package once copied or pre-filled to skip importing torch._dynamo
PRIVATE = {
    "_optimizer_step_code",
    "_opt_called",
    "profile_hook_step",
    "_wrapped_by_lr_sched",
    "__dynamo_disable",
    "_global_optimizer_pre_hooks",
    "_global_optimizer_post_hooks",
}


def private_uses(source: str) -> set[str]:
    """The :data:`PRIVATE` names ``source`` uses, as attributes, names or strings (``getattr(f, "...")``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found & PRIVATE


def test_no_module_of_the_package_touches_torchs_optimizer_internals():
    used = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "omni_sfp").rglob("*.py"))
        if (names := private_uses(path.read_text()))
    }
    assert used == {}


def test_the_check_sees_a_copy_of_torchs_step():
    copied = "def step(self):\n    self._optimizer_step_code()\n    self._opt_called = True\n"
    assert private_uses(copied) == {"_optimizer_step_code", "_opt_called"}
    assert private_uses('_CACHE = "__dynamo_disable"') == {"__dynamo_disable"}


@pytest.mark.slow
def test_the_runners_optimizer_steps_invalidate_the_cache_in_a_fresh_process(tmp_path):
    """``python -m omni_sfp.train``'s own path, in a process where nothing was imported before: the agent's
    optimizer steps with torch's own ``step``, and a cache entry made before a step is not served after it."""
    script = textwrap.dedent("""
        import sys
        import torch
        from omni_sfp.run import runner

        train = runner.Runner.train

        def checked_train(self):
            step = self.agent.optimizer.step  # an LR scheduler wraps it, in torch's own wrapper
            assert step.__module__.startswith("torch."), f"optimizer.step comes from {step.__module__}"
            summary = train(self)
            assert summary.sfp_hit_rate == 1.0, summary.sfp_hit_rate
            model = self.agent.policy
            x = torch.randn(8, 4)
            with torch.no_grad():
                model.act({"observations": x}, role="value")
                model.reset_sfp_stats()
                model.act({"observations": x}, role="value")
                assert (model.sfp_stats.hits, model.sfp_stats.misses) == (1, 0)  # served before a step
                self.agent.optimizer.step()  # no gradients: no parameter moves, only the step hooks run
                model.act({"observations": x}, role="value")
                assert model.sfp_stats.misses == 1, "an entry made before the step was served after it"
            print("checked")
            return summary

        runner.Runner.train = checked_train
        from omni_sfp.train import main

        sys.exit(main(sys.argv[1:]))
    """)
    overrides = ["num_envs=8", "train.models.units=[16,16]", "train.ppo.rollouts=4", "train.ppo.mini_batches=2"]
    # every CPU choice forced: a first start's probe steps an optimizer, which would import torch._dynamo before
    # the runner's optimizer exists, the state of every later start
    overrides += [
        "train.kernels.elu_no_grad=torch",
        "train.kernels.elu_autograd=torch",
        "train.kernels.allocator=glibc",
        "train.kernels.threads=1",
        "train.ppo.fused_optimizer=true",
    ]
    result = subprocess.run(
        [sys.executable, "-c", script, *overrides, "max_iterations=1", f"runs_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0 and "checked" in result.stdout, result.stderr[-2000:]
