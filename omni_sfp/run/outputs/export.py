"""Export a trained policy for deployment: ``exported/policy.pt`` (TorchScript) and ``exported/policy.onnx``.

What Isaac Lab's ``play.py`` and rsl_rl export, for this runner's models: one module from raw observations to
actions, with the observation normaliser (skrl's ``RunningStandardScaler``) inside it, the deterministic (mean)
action of the Gaussian policy, clipped to the action space's finite bounds, which is what every embedded task
does with the actions it is given. Load it with ``torch.jit.load`` or ``onnxruntime.InferenceSession`` alone:
neither needs omni_sfp, skrl or the checkpoint.

The ONNX file comes from torch's TorchScript-based exporter (``dynamo=False``): it needs only torch, and writes
a small MLP in well under a second with the ``onnx`` package; torch 2.13's default (dynamo) exporter also needs
``onnxscript`` and takes ~20 s for the same graph. ``pip install omni-sfp[export]`` installs ``onnx`` (to write)
and ``onnxruntime`` (to run the file, as the tests do).
A recurrent policy (:mod:`omni_sfp.sfp.recurrent`) is exported with its hidden state as an explicit input and
output: ``(observations, h_in[, c_in]) -> (actions, h_out[, c_out])``, the states ``(num_layers, batch, hidden)``;
the deployer feeds each step's ``*_out`` to the next step and zeroes a row where its episode starts.

Both files are written atomically (temporary file, then rename): a reader never sees half a file.
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from omni_sfp.run.outputs.base import OutputError, RunOutput

EXPORT_FOLDER = "exported"
INPUT_NAME, OUTPUT_NAME = "observations", "actions"
HIDDEN_NAMES = ("h", "c")  # a recurrent policy's hidden states: h_in/h_out (and an LSTM's c_in/c_out)
ONNX_OPSET = 17


class ExportError(OutputError):
    """The model cannot be exported (an unknown model class, a non-Box space): one line naming the cause."""


class DeployedPolicy(nn.Module):
    """Observations -> deterministic actions: normalise (skrl's ``RunningStandardScaler`` arithmetic, the same
    float32 operations in the same order), the policy network's mean, then the action bounds.

    :param network: The policy's mean network (trunk + head), observations of size ``mean.shape[-1]`` in.
    :param mean: Running mean of the observations (``None``: no normaliser).
    :param variance: Running variance of the observations.
    :param epsilon: Added to the standard deviation, as skrl's scaler does.
    :param clip_threshold: Normalised observations are clamped to +-this, as skrl's scaler does.
    :param low: Per-component lower action bound (``-inf``: none).
    :param high: Per-component upper action bound (``inf``: none).
    """

    def __init__(
        self,
        network: nn.Module,
        mean: torch.Tensor | None,
        variance: torch.Tensor | None,
        epsilon: float,
        clip_threshold: float,
        low: torch.Tensor,
        high: torch.Tensor,
        flat_parts: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.network = network
        self.normalize = mean is not None
        self.masked = flat_parts is not None  # a Dict / Tuple: only its flat Box columns are normalised
        self.register_buffer("obs_flat", flat_parts.bool().clone() if flat_parts is not None else torch.ones(0).bool())
        size = low.shape[-1] if mean is None else mean.shape[-1]
        # skrl keeps float64 statistics and computes with their float32 casts: store exactly those casts
        self.register_buffer("obs_mean", (mean if mean is not None else torch.zeros(size)).float().clone())
        self.register_buffer("obs_std", (variance.float().sqrt() if variance is not None else torch.ones(size)).clone())
        self.epsilon = float(epsilon)
        self.clip_threshold = float(clip_threshold)
        self.clip_low = bool(torch.isfinite(low).any())
        self.clip_high = bool(torch.isfinite(high).any())
        # an infinite bound stays infinite: clamping to +-inf changes nothing, component by component
        self.register_buffer("action_low", low.float().clone())
        self.register_buffer("action_high", high.float().clone())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self._bounded(self.network(self._normalised(observations)))

    def _normalised(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            scaled = torch.clamp(
                (x - self.obs_mean) / (self.obs_std + self.epsilon), min=-self.clip_threshold, max=self.clip_threshold
            )
            x = torch.where(self.obs_flat, scaled, x) if self.masked else scaled
        return x

    def _bounded(self, actions: torch.Tensor) -> torch.Tensor:
        if self.clip_low:
            actions = torch.maximum(actions, self.action_low)
        if self.clip_high:
            actions = torch.minimum(actions, self.action_high)
        return actions


class DeployedRecurrentPolicy(DeployedPolicy):
    """:class:`DeployedPolicy` of a recurrent policy: ``(observations, *hidden) -> (actions, *hidden_after)``."""

    def forward(self, observations: torch.Tensor, *hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        actions, *after = self.network(self._normalised(observations), *hidden)
        return (self._bounded(actions), *after)


def check_config(cfg) -> None:
    """``export`` of a run config: a bool, and the onnx package installed when it is true (checked before training,
    not after it).

    :raises ExportError: naming the problem.
    """
    import importlib.util

    if not isinstance(cfg.export, bool):
        raise ExportError(f"export={cfg.export!r}: expected true or false")
    if cfg.export and importlib.util.find_spec("onnx") is None:
        raise ExportError(
            "export=true writes policy.onnx with the onnx package, which is not installed: "
            "pip install 'omni-sfp[export]'"
        )


@dataclass(frozen=True)
class ExportedPolicy:
    """Where :func:`export_policy` wrote the two files."""

    torchscript: Path
    onnx: Path


def policy_network(policy: nn.Module) -> nn.Module:
    """The module that maps normalised observations to deterministic actions (and, for a recurrent policy, the
    hidden state in and out): :func:`omni_sfp.sfp.models.deterministic_policy`, the same for every network the
    builder builds. It shares the policy's parameters (:func:`deployed_policy` copies it).

    :raises ExportError: a model the builder did not build (its ``compute`` may do anything; wrap it yourself),
        or a policy that reads states.
    """
    from omni_sfp.sfp.models import deterministic_policy
    from omni_sfp.sfp.network import NetworkSpecError

    try:
        return deterministic_policy(policy)
    except NetworkSpecError as error:
        raise ExportError(str(error)) from None


def deployed_policy(policy: nn.Module, observation_preprocessor: nn.Module | None, action_space) -> DeployedPolicy:
    """A CPU float32 copy of ``policy``'s deterministic path, normaliser folded in (the originals are untouched).

    :param observation_preprocessor: The agent's observation normaliser (``None`` or skrl's empty preprocessor
        when ``observation_normalization`` is off).
    :param action_space: A Gymnasium ``Box``: its finite bounds clip the actions.
    :raises ExportError: Not a Box action space, or an unknown model or normaliser.
    """
    import gymnasium

    discrete = isinstance(action_space, gymnasium.spaces.Discrete | gymnasium.spaces.MultiDiscrete)
    if not isinstance(action_space, gymnasium.spaces.Box) and not discrete:
        raise ExportError(
            f"cannot export a policy for a {type(action_space).__name__} action space (Box, Discrete, MultiDiscrete)"
        )
    source = policy_network(policy)
    if discrete and getattr(source, "kind", "GaussianMixin") == "GaussianMixin":
        raise ExportError(f"cannot export a Gaussian policy for a {type(action_space).__name__} action space")
    network = copy.deepcopy(source).to("cpu", torch.float32).eval()
    for module in network.modules():  # a trunk compiled by compile_policy.compile_trunk: export its own forward
        if "forward" in vars(module):
            del module.forward
    for parameter in network.parameters():
        parameter.requires_grad_(False)
    mean = variance = flat_parts = None
    epsilon, clip_threshold = 0.0, float("inf")
    if isinstance(observation_preprocessor, nn.Module):
        if not hasattr(observation_preprocessor, "running_mean"):
            raise ExportError(
                f"cannot fold a {type(observation_preprocessor).__name__} observation preprocessor "
                "into the exported policy (only skrl's RunningStandardScaler)"
            )
        mean = observation_preprocessor.running_mean.detach().cpu()
        variance = observation_preprocessor.running_variance.detach().cpu()
        epsilon, clip_threshold = observation_preprocessor.epsilon, observation_preprocessor.clip_threshold
        flat_parts = getattr(observation_preprocessor, "flat_parts", None)
        flat_parts = None if flat_parts is None else flat_parts.detach().cpu()
    if discrete:  # argmax indices: nothing to clip
        size = 1 if isinstance(action_space, gymnasium.spaces.Discrete) else len(action_space.nvec)
        low, high = torch.full((size,), -float("inf")), torch.full((size,), float("inf"))
    else:
        low = torch.as_tensor(np.asarray(action_space.low, dtype=np.float32)).flatten()
        high = torch.as_tensor(np.asarray(action_space.high, dtype=np.float32)).flatten()
    from omni_sfp.sfp.recurrent import RecurrentDeterministicPolicy

    deployed = DeployedRecurrentPolicy if isinstance(network, RecurrentDeterministicPolicy) else DeployedPolicy
    return deployed(network, mean, variance, epsilon, clip_threshold, low, high, flat_parts).eval()


def export_policy(
    policy: nn.Module,
    observation_preprocessor: nn.Module | None,
    action_space,
    folder: str | Path,
    *,
    observation_size: int | None = None,
) -> ExportedPolicy:
    """Write ``folder/policy.pt`` (TorchScript) and ``folder/policy.onnx`` (input ``observations`` of shape
    ``(batch, obs)``, output ``actions`` of shape ``(batch, act)``, any batch size).

    :param observation_size: Length of an observation (default: the policy's ``num_observations``).
    :raises ExportError: The onnx package is missing, or :func:`deployed_policy` refuses the model.
    """
    import importlib.util

    if importlib.util.find_spec("onnx") is None:
        raise ExportError(
            "export=true writes policy.onnx with the onnx package, which is not installed: "
            "pip install 'omni-sfp[export]'"
        )
    from omni_sfp.sfp.network import DeterministicPolicy
    from omni_sfp.sfp.recurrent import RecurrentDeterministicPolicy

    module = deployed_policy(policy, observation_preprocessor, action_space)
    size = int(observation_size if observation_size is not None else policy.num_observations)
    example: tuple[torch.Tensor, ...] = (torch.zeros(2, size),)
    inputs, outputs = [INPUT_NAME], [OUTPUT_NAME]
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}
    if isinstance(module.network, RecurrentDeterministicPolicy):  # the hidden state in and out, explicitly
        layers, hidden = module.network.state_size
        names = HIDDEN_NAMES[: module.network.states]
        example += tuple(torch.zeros(layers, 2, hidden) for _ in names)
        inputs += [f"{name}_in" for name in names]
        outputs += [f"{name}_out" for name in names]
        axes.update({name: {1: "batch"} for name in inputs[1:] + outputs[1:]})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # torch 2.13 deprecates TorchScript; deployers still load it
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # nn.LSTM's shape checks, traced as constants
        if isinstance(module.network, DeterministicPolicy | RecurrentDeterministicPolicy):  # Python expressions: trace
            scripted = torch.jit.trace(module, example, check_trace=False)
        else:
            scripted = torch.jit.script(module)
    torchscript = _atomic(folder / "policy.pt", lambda tmp: scripted.save(str(tmp)))

    def write_onnx(tmp: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation notice
            torch.onnx.export(
                module,
                example,
                str(tmp),
                dynamo=False,
                opset_version=ONNX_OPSET,
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=axes,
            )

    onnx = _atomic(folder / "policy.onnx", write_onnx)
    return ExportedPolicy(torchscript, onnx)


def _atomic(path: Path, write: Callable[[Path], None]) -> Path:
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


class Export(RunOutput):
    """``export=true``: at the end (of training, or of ``test=true``'s evaluation), ``exported/policy.pt`` and
    ``policy.onnx`` in the run's outputs folder."""

    order = 40

    def __init__(self) -> None:
        self.exported: ExportedPolicy | None = None

    def end(self, run, summary) -> None:
        run.agent.enable_models_training_mode(False)
        self.exported = export_policy(
            run.agent.policy,
            run.agent.checkpoint_modules.get("observation_preprocessor"),
            run.env.action_space,
            run.outputs_dir / EXPORT_FOLDER,
        )

    def lines(self) -> list[str]:
        if self.exported is None:
            return []
        return [f"[omni_sfp] exported policy: {self.exported.torchscript} and {self.exported.onnx}"]


def output_for(cfg, *, main: bool) -> Export | None:
    return Export() if cfg.export and main else None
