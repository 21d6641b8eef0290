"""The CUDA paths, on a GPU; skipped where there is none (CI has none).

Each test restates a CPU test's claim on the GPU, where kernels, autocast (fp16 with a GradScaler, not CPU's
bf16) and the random-number generator differ: the cache serves the double pass's numbers, a trunk that draws
random numbers keeps the CUDA generator's stream, the embedded task trains with mixed precision and resumes
bitwise, the spec-built networks (CNN on images, Categorical) train, and a policy trained on the GPU exports
to a CPU file that gives its actions. ``python -m omni_sfp.bench.gpu`` runs this file on a lent GPU.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before its first handle)

import pytest  # noqa: E402
import torch  # noqa: E402
from tolerances import assert_summation_order_close  # noqa: E402
from torch import nn  # noqa: E402

from omni_sfp import SharedActorCritic, SingleForwardPass  # noqa: E402
from omni_sfp.run.compose import load_config  # noqa: E402
from omni_sfp.run.outputs.export import Export  # noqa: E402
from omni_sfp.run.runner import Runner  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (on a GPU machine: python -m omni_sfp.bench.gpu)"
)

OBS, ACT = 6, 2
SMALL = [
    "device=cuda",
    "num_envs=64",
    "train.models.units=[32,32]",
    "train.ppo.rollouts=8",
    "train.ppo.mini_batches=2",
    "train.ppo.learning_epochs=2",
    "task.env.max_episode_length=20",
]


@pytest.fixture
def deterministic():
    """cuBLAS and scatter kernels that give the same bits on every run (resume is compared bitwise)."""
    torch.use_deterministic_algorithms(True, warn_only=True)  # a kernel without a deterministic twin warns
    yield
    torch.use_deterministic_algorithms(False)


def model(cache_check: str = "auto") -> SharedActorCritic:
    torch.manual_seed(0)
    import gymnasium

    box = gymnasium.spaces.Box
    return SharedActorCritic(box(-1, 1, (OBS,)), box(-1, 1, (ACT,)), "cuda", units=(64, 32), cache_check=cache_check)


@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_cuda_cache_serves_the_double_pass_values_and_gradients(dtype):
    cached, double = model("auto"), model("off")
    x = torch.randn(257, OBS, device="cuda")
    outputs = {}
    for name, shared in (("cached", cached), ("double", double)):
        with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
            value = shared.act({"observations": x}, role="value")[0]
            mean = shared.act({"observations": x}, role="policy")[1]["mean_actions"]
        (mean.float().pow(2).sum() + value.float().pow(2).sum()).backward()
        outputs[name] = (value, mean)
    assert cached.sfp_stats.hits == 1 and double.sfp_stats.hits == 0
    for got, expected in zip(outputs["cached"], outputs["double"]):
        assert got.dtype == expected.dtype and torch.equal(got, expected)  # the same kernels on the same input
    for (name, a), (_, b) in zip(cached.named_parameters(), double.named_parameters()):
        if b.grad is None:  # log_std: no part of this loss
            assert a.grad is None, name
        elif dtype is None:
            assert_summation_order_close(a.grad, b.grad, name=name)
        else:  # the half-precision trunk gradient is summed once (SFP) or per head: half-precision rounding
            torch.testing.assert_close(a.grad, b.grad, rtol=2e-2, atol=2e-2 * b.grad.abs().max().item(), msg=name)


def test_cuda_a_trunk_that_draws_random_numbers_keeps_the_cuda_generators_stream():
    """The key holds the CUDA generator's offset: dropout on the GPU is drawn per call, as in the double pass."""
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(OBS, 32), nn.Dropout(0.3)).cuda()
    sfp = SingleForwardPass(trunk)
    x = torch.randn(9, OBS, device="cuda")
    torch.cuda.manual_seed(3)
    got = [sfp(x), sfp(x)]
    offset = torch.cuda.default_generators[torch.cuda.current_device()].get_offset()
    torch.cuda.manual_seed(3)
    expected = [trunk(x), trunk(x)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected)) and not torch.equal(got[0], got[1])
    assert offset == torch.cuda.default_generators[torch.cuda.current_device()].get_offset()
    assert (sfp.stats.hits, sfp.stats.bypasses) == (0, 2)


def agent_state(runner: Runner) -> dict:
    agent = runner.agent
    return {
        "modules": {name: module.state_dict() for name, module in agent.checkpoint_modules.items()},
        "scaler": agent.scaler.state_dict(),
    }


def assert_bitwise_equal(a, b, path="state"):
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


def test_cuda_mixed_precision_training_uses_a_gradscaler_hits_the_cache_and_resumes_bitwise(tmp_path, deterministic):
    def train(*overrides):
        runner = Runner(load_config([*SMALL, "train.mixed_precision=true", f"runs_dir={tmp_path}", *overrides]))
        return runner, runner.train()

    full, summary = train("max_iterations=4", "experiment=full")
    assert full.agent.device.type == "cuda" and full.agent.scaler.is_enabled()
    assert summary.sfp_hit_rate == 1.0
    assert all(torch.isfinite(p).all() for p in full.agent.policy.parameters())
    _, part = train("max_iterations=3", "experiment=part", "train.checkpoint_interval=2")
    resumed, _ = train("max_iterations=4", "resume=true", f"checkpoint={part.run_dir}/checkpoints/iter_2.pt")
    assert_bitwise_equal(agent_state(full), agent_state(resumed))


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_cuda_spec_built_networks_train_cnn_on_images_and_categorical(tmp_path, precision):
    from test_task_shapes import MatchTheTarget  # noqa: F401  (registers OmniSfpTests/MatchTheTarget-v0)

    mixed = f"train.mixed_precision={precision == 'mixed'}"
    common = ["device=cuda", "num_envs=16", "train.ppo.rollouts=16", "train.ppo.mini_batches=2", mixed]
    for task, extra in (("gym:CartPole-v1", []), ("gym:OmniSfpTests/MatchTheTarget-v0", ["+task.env.image=true"])):
        runner = Runner(load_config([f"task={task}", *common, "max_iterations=3", f"runs_dir={tmp_path}", *extra]))
        summary = runner.train()
        assert runner.agent.device.type == "cuda" and summary.sfp_hit_rate == 1.0, task
        assert all(torch.isfinite(p).all() for p in runner.agent.policy.parameters()), task


def test_cuda_a_gpu_trained_policy_exports_to_cpu_files_that_give_its_actions(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    runner = Runner(load_config([*SMALL, "max_iterations=2", "export=true", f"runs_dir={tmp_path}"]))
    runner.train()
    exported = runner.output(Export).exported
    observations = torch.randn(33, 4)  # the embedded Cartpole's observation
    runner.agent.enable_models_training_mode(False)
    with torch.no_grad():
        normalised = runner.agent.checkpoint_modules["observation_preprocessor"](observations.cuda())
        _, outputs = runner.agent.policy.act({"observations": normalised}, role="policy")
    space = runner.env.action_space
    low, high = (torch.as_tensor(bound, dtype=torch.float32) for bound in (space.low, space.high))
    expected = torch.maximum(torch.minimum(outputs["mean_actions"].cpu(), high), low)
    scripted = torch.jit.load(str(exported.torchscript), map_location="cpu")
    session = onnxruntime.InferenceSession(str(exported.onnx), providers=["CPUExecutionProvider"])
    from_onnx = torch.from_numpy(session.run(["actions"], {"observations": observations.numpy()})[0])
    for name, actions in (("TorchScript", scripted(observations)), ("ONNX", from_onnx)):
        torch.testing.assert_close(actions, expected, rtol=1e-4, atol=1e-5, msg=name)


def test_cuda_compiled_trunk_trains_and_hits_the_cache(tmp_path):
    runner = Runner(load_config([*SMALL, "max_iterations=2", "train.models.compile=true", f"runs_dir={tmp_path}"]))
    summary = runner.train()
    assert summary.sfp_hit_rate == 1.0
    assert all(torch.isfinite(p).all() for p in runner.agent.policy.parameters())


# -- the captured step: compiled, replayed from a CUDA graph ---------------------------------------------------
def captured_runner(tmp_path, capture: str, *overrides):
    cfg = load_config(
        [*SMALL, "train.capture=false", "train.ppo.fused_optimizer=true", f"runs_dir={tmp_path}", *overrides]
    )
    runner = Runner(cfg)
    if capture != "off":
        runner.agent.set_capture(capture)
    return runner


def parameters_of(runner: Runner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in runner.agent.policy.parameters()]


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_cuda_a_graphed_update_equals_the_eager_one_within_the_bound(tmp_path, precision):
    """docs/reliability.md's bound for a captured step: losses within a relative 1e-4 (fp32; fp16 autocast: 1e-2),
    parameters within n * lr after n optimizer steps. One iteration: the same rollout on both sides."""
    mixed = f"train.mixed_precision={precision == 'mixed'}"
    results = {}
    for capture in ("off", "graph"):
        runner = captured_runner(
            tmp_path, capture, mixed, "max_iterations=1", "train.ppo.learning_epochs=1", f"experiment={capture}"
        )
        torch.manual_seed(0)
        torch.cuda.manual_seed(0)
        runner.train()
        results[capture] = runner
    eager, graphed = results["off"], results["graph"]
    assert graphed.agent._graphed is not None and graphed.agent._graphed.captures == 1
    tolerance = 1e-4 if precision == "fp32" else 1e-2
    for name in ("policy_loss", "value_loss", "kl"):
        a, b = eager.agent.last_losses[name], graphed.agent.last_losses[name]
        assert abs(a - b) <= tolerance * abs(a) + 1e-7, (name, a, b)
    steps, lr = eager.agent.last_losses["minibatches"], eager.cfg.train.ppo.learning_rate
    for a, b in zip(parameters_of(eager), parameters_of(graphed)):
        assert (a - b).abs().max() <= steps * lr
    assert graphed.agent.sfp_share_rate == 1.0


def test_cuda_a_graph_is_captured_again_when_the_parameters_it_read_move(tmp_path):
    runner = captured_runner(tmp_path, "graph", "max_iterations=2")
    runner.train()
    graphed = runner.agent._graphed
    assert graphed.captures == 1
    weight = runner.agent.policy.value_head.weight
    weight.data = weight.data.clone()  # the same parameter in new memory: the graph's recorded address is stale
    assert runner.agent._capture_key() != next(iter(graphed._graphs.values())).key
    runner.learner.iterations = 3
    runner.learner.learn()
    assert graphed.captures == 2
    assert all(torch.isfinite(p).all() for p in runner.agent.policy.parameters())


def test_cuda_capturing_leaves_the_state_as_it_found_it(tmp_path):
    """The warm-up calls are real steps on the side stream; the snapshot puts parameters, optimizer state and sums
    back before the graph records, so the first replay is the first step."""
    runner = captured_runner(tmp_path, "graph", "max_iterations=1")
    agent = runner.agent
    step = agent._step
    restore = step.snapshot()
    before = parameters_of(runner)
    for _ in range(2):  # steps that move the parameters
        from omni_sfp.ppo.minibatches import Minibatch

        n, obs = 64, agent.observation_space.shape[0]
        batch = Minibatch(
            torch.randn(n, obs, device="cuda"),
            None,
            torch.randn(n, 1, device="cuda"),
            torch.zeros(n, 1, device="cuda"),
            torch.zeros(n, 1, device="cuda"),
            torch.ones(n, 1, device="cuda"),
            torch.ones(n, 1, device="cuda"),
        )
        step(*batch.tensors())
    assert not all(torch.equal(a, b) for a, b in zip(before, parameters_of(runner)))
    restore()
    assert all(torch.equal(a, b) for a, b in zip(before, parameters_of(runner)))
