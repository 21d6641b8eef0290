"""The exported policy (TorchScript and ONNX) gives the checkpoint's deterministic actions.

The reference is what the runner's evaluation feeds the task: skrl's observation normaliser, the policy's
``mean_actions``, then the task's clip to the action bounds. The exported files must agree within the float32
rounding bound of :func:`rounding_bound`, derived below, for raw observations well outside the normaliser's
clip range and for actions beyond the bounds (so normaliser, clamp and clip are all exercised).
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler
from torch import nn

from omni_sfp.run.outputs.export import DeployedPolicy, ExportError, deployed_policy, export_policy
from omni_sfp.sfp.models import SharedActorCritic, mlp_models

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

U = 2.0**-24  # float32 unit roundoff
# largest slope of each activation (ELU with alpha=1, SELU: scale * alpha at 0-, SiLU and GELU: their maxima)
LIPSCHITZ = {
    nn.ELU: 1.0,
    nn.ReLU: 1.0,
    nn.Tanh: 1.0,
    nn.LeakyReLU: 1.0,
    nn.SELU: 1.7581,
    nn.SiLU: 1.0998,
    nn.GELU: 1.1290,
}


def rounding_bound(module: DeployedPolicy, observations: torch.Tensor) -> torch.Tensor:
    """Per-component bound on the difference of two float32 evaluations of ``module`` that order sums differently.

    Both evaluate the same operations; they may differ only in rounding: the normalisation's elementwise
    operations (correctly rounded: at most 2u|z| apart after the two roundings), a Linear layer with ``n``
    inputs (each within gamma_{n+1} (|W||h| + |b|) of the exact result, gamma_k = k u / (1 - k u)), and an
    activation's library function (assumed within 4 ulps of its output, and of 1, for exp-based ones, whose
    ``exp(x) - 1`` cancels near 0). Errors carried in are amplified by |W| and by the activation's slope; the
    final clamp is 1-Lipschitz. Computed in float64 from the float32 weights.
    """

    def gamma(k: int) -> float:
        return k * U / (1 - k * U)

    x = observations.double()
    if module.normalize:
        z = torch.clamp(
            (x - module.obs_mean.double()) / (module.obs_std.double() + module.epsilon),
            -module.clip_threshold,
            module.clip_threshold,
        )
    else:
        z = x
    h, error = z, 2 * U * z.abs()
    leaves = [m for m in module.network.modules() if not list(m.children())]
    for layer in leaves:
        if isinstance(layer, nn.Linear):
            weight, bias = layer.weight.double(), layer.bias.double()
            magnitude = h.abs() @ weight.abs().T + bias.abs()
            error = error @ weight.abs().T + 2 * gamma(layer.in_features + 1) * magnitude
            h = h @ weight.T + bias
        else:
            h_next = layer.double()(h)
            lipschitz = next(
                bound for kind, bound in LIPSCHITZ.items() if isinstance(layer, kind)
            )  # omni_sfp's ELU too
            error = lipschitz * error + 2 * 4 * U * (h_next.abs() + 1.0)
            h = h_next
    return error.float()


def trained_scaler(size: int, generator: torch.Generator) -> RunningStandardScaler:
    """A normaliser that has seen data with means 3 and standard deviations 5 per component."""
    scaler = RunningStandardScaler(size, device="cpu")
    for _ in range(4):
        scaler(3.0 + 5.0 * torch.randn(256, size, generator=generator), train=True)
    return scaler


def reference_actions(policy, scaler, observations: torch.Tensor, space: gymnasium.spaces.Box) -> torch.Tensor:
    """What the runner's evaluation steps the task with, clipped as the task clips it."""
    policy.eval()
    with torch.no_grad():
        inputs = {"observations": scaler(observations) if scaler is not None else observations}
        _, outputs = policy.act(inputs, role="policy")
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    return torch.minimum(torch.maximum(outputs["mean_actions"], low), high)


def build(kind: str, obs: int, act: int, bounded: bool):
    torch.manual_seed(3)
    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs,), np.float32)
    bound = 1.0 if bounded else np.inf
    action_space = gymnasium.spaces.Box(-bound, bound, (act,), np.float32)
    if kind == "shared":
        policy = SharedActorCritic(observation_space, action_space, "cpu", units=(64, 32), activation="elu")
    else:
        models = mlp_models(
            observation_space, action_space, "cpu", units=(48, 48, 16), activation="tanh", separate=True
        )
        policy = models["policy"]
    head = policy.policy_head.linear
    with torch.no_grad():
        head.weight.mul_(300.0)  # a trained policy's actions reach the bounds: make these do too
    return policy, action_space


@pytest.mark.parametrize(
    "kind, obs, act, bounded, normalized",
    [
        ("shared", 4, 1, True, True),  # Cartpole's shape and bounds
        ("separate", 60, 8, False, True),  # LQR60x8's: unbounded actions
        ("shared", 7, 3, True, False),  # observation_normalization=false
    ],
)
def test_exported_files_give_the_checkpoint_actions(tmp_path, kind, obs, act, bounded, normalized):
    onnxruntime = pytest.importorskip("onnxruntime", reason="pip install omni-sfp[export]")
    generator = torch.Generator().manual_seed(0)
    policy, action_space = build(kind, obs, act, bounded)
    scaler = trained_scaler(obs, generator) if normalized else None
    exported = export_policy(policy, scaler, action_space, tmp_path / "exported")
    assert exported.torchscript == tmp_path / "exported" / "policy.pt"
    assert sorted(p.name for p in (tmp_path / "exported").iterdir()) == ["policy.onnx", "policy.pt"]  # no temp left

    scripted = torch.jit.load(str(exported.torchscript))
    session = onnxruntime.InferenceSession(str(exported.onnx), providers=["CPUExecutionProvider"])
    module = deployed_policy(policy, scaler, action_space)
    for batch in (1, 37):  # any batch size: the ONNX batch axis is dynamic
        observations = 3.0 + 12.0 * torch.randn(batch, obs, generator=generator)  # past the normaliser's +-5 clip
        expected = reference_actions(policy, scaler, observations, action_space)
        bound = rounding_bound(module, observations)
        if bounded and batch > 1:
            saturated = (expected.abs() == 1.0).float().mean().item()
            assert 0.05 < saturated < 0.95, (
                f"{saturated:.2f} clipped: the test should exercise both clipped and free actions"
            )
        with torch.no_grad():
            from_torchscript = scripted(observations)
        from_onnx = torch.from_numpy(session.run(["actions"], {"observations": observations.numpy()})[0])
        for name, actions in (("TorchScript", from_torchscript), ("ONNX", from_onnx)):
            assert actions.shape == (batch, act) and actions.dtype == torch.float32, name
            excess = (actions - expected).abs() - bound
            assert excess.max().item() <= 0, f"{name}: off by {excess.max().item():.3g} beyond the rounding bound"


def test_the_bound_catches_a_policy_exported_without_its_normaliser(tmp_path):
    """The tolerance is tight enough to see the normaliser missing (so the test above can fail)."""
    generator = torch.Generator().manual_seed(1)
    policy, action_space = build("shared", 4, 1, True)
    scaler = trained_scaler(4, generator)
    observations = 3.0 + 12.0 * torch.randn(64, 4, generator=generator)
    expected = reference_actions(policy, scaler, observations, action_space)
    wrong = deployed_policy(policy, None, action_space)
    with torch.no_grad():
        assert ((wrong(observations) - expected).abs() > rounding_bound(wrong, observations)).any()


def test_export_copies_the_model_and_refuses_what_it_cannot_export(tmp_path):
    policy, action_space = build("shared", 4, 1, True)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    module = deployed_policy(policy, None, action_space)
    with torch.no_grad():
        next(module.network.parameters()).add_(1.0)
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items()), "the export must not alias the model"
    assert policy.layers[0].weight.requires_grad

    with pytest.raises(ExportError, match="Gaussian policy for a Discrete action space"):
        deployed_policy(policy, None, gymnasium.spaces.Discrete(3))
    with pytest.raises(ExportError, match="cannot export a Linear"):
        deployed_policy(nn.Linear(4, 1), None, action_space)


@pytest.mark.parametrize("kind", ["camera", "discrete", "multidiscrete"])
def test_spec_built_policies_export_their_deterministic_actions(tmp_path, kind):
    """A CNN on images, argmax for Discrete and MultiDiscrete: both files give the live model's deterministic
    actions (before: ``cannot export a CategoricalSpecActorCritic``, ``only Box``)."""
    import gymnasium
    import onnxruntime

    from omni_sfp.sfp import models as sfp_models
    from omni_sfp.sfp import network
    from tests.test_network import CAMERA_MODELS

    box = gymnasium.spaces.Box(-1.0, 1.0, (3,))
    if kind == "camera":
        obs, act = gymnasium.spaces.Box(0.0, 1.0, (6, 48, 48)), gymnasium.spaces.Box(-0.5, 0.5, (1,))
        models = CAMERA_MODELS
    else:
        obs = box
        act = gymnasium.spaces.Discrete(4) if kind == "discrete" else gymnasium.spaces.MultiDiscrete([3, 2])
        models = network.default_spec(
            obs, act, units=[16], activation="elu", separate=False, initial_log_std=0, task="t"
        )
    policy = sfp_models.build_models(network.parse(models), obs, act, torch.device("cpu"))["policy"]
    x = torch.randn(5, gymnasium.spaces.flatdim(obs))
    with torch.no_grad():
        _, outputs = policy.act({"observations": x}, role="policy")
    expected = outputs["mean_actions"]
    if kind == "camera":
        expected = expected.clamp(-0.5, 0.5)
    exported = export_policy(policy, None, act, tmp_path)
    scripted = torch.jit.load(str(exported.torchscript))
    torch.testing.assert_close(scripted(x), expected)
    session = onnxruntime.InferenceSession(str(exported.onnx))
    (onnx_actions,) = session.run(None, {"observations": x.numpy()})
    np.testing.assert_allclose(onnx_actions, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_a_recurrent_policy_exports_its_hidden_state_as_an_input_and_an_output(tmp_path, cls):
    """``(observations, h_in[, c_in]) -> (actions, h_out[, c_out])``: stepping either file through an episode, the
    state of each step fed to the next, gives the live model's deterministic actions with its normaliser."""
    from omni_sfp.sfp import models as sfp_models
    from omni_sfp.sfp import network

    pytest.importorskip("onnxruntime", reason="pip install omni-sfp[export]")
    import onnxruntime

    obs, act = gymnasium.spaces.Box(-5.0, 5.0, (3,)), gymnasium.spaces.Box(-0.5, 0.5, (2,))
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [8], "activations": "elu"}]
    spec = network.parse(
        {
            "rnn": {"class": cls, "hidden_size": 6, "num_layers": 2},
            "policy": {"network": net},
            "value": {"network": net},
        }
    )
    torch.manual_seed(0)
    policy = sfp_models.build_models(spec, obs, act, torch.device("cpu"), num_envs=4)["policy"]
    scaler = RunningStandardScaler(size=obs, device="cpu")
    scaler(torch.randn(64, 3) * 2 + 1, train=True)
    exported = export_policy(policy, scaler, act, tmp_path)
    scripted = torch.jit.load(str(exported.torchscript))
    session = onnxruntime.InferenceSession(str(exported.onnx))
    names = ["h", "c"][: policy.rnn_spec.states]
    assert [i.name for i in session.get_inputs()] == ["observations", *(f"{n}_in" for n in names)]
    assert [o.name for o in session.get_outputs()] == ["actions", *(f"{n}_out" for n in names)]
    live = policy.initial_states(4)
    mine, theirs = list(live), [s.numpy() for s in live]
    for _ in range(5):
        x = torch.randn(4, 3) * 2
        with torch.no_grad():
            _, outputs = policy.act({"observations": scaler(x), "rnn": live}, role="policy")
        live = outputs["rnn"]
        expected = outputs["mean_actions"].clamp(-0.5, 0.5)
        actions, *mine = scripted(x, *mine)
        torch.testing.assert_close(actions, expected)
        onnx_actions, *theirs = session.run(
            None, {"observations": x.numpy(), **dict(zip(session_inputs(session), theirs))}
        )
        np.testing.assert_allclose(onnx_actions, expected.numpy(), rtol=1e-4, atol=1e-5)
    for state, script_state, onnx_state in zip(live, mine, theirs):
        torch.testing.assert_close(script_state, state)
        np.testing.assert_allclose(onnx_state, state.numpy(), rtol=1e-4, atol=1e-5)


def session_inputs(session) -> list[str]:
    return [i.name for i in session.get_inputs()][1:]
