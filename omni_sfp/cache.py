"""The keyed single-forward-pass cache for a shared trunk.

skrl calls a shared policy/value model twice on the same input (role "policy", then "value"). Running
the trunk once and serving the second call from a cache removes a whole forward and, because both heads
then hang off one trunk output, a whole backward. The cache here is safe where skrl's built-in one is
not: an entry is served only when the input *and* everything else that changes the trunk's result is the
same as when it was computed (see ``SingleForwardPass``). It knows torch, not skrl.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from omni_sfp.schema import CACHE_CHECKS  # defined once, with every setting

CacheCheck = Literal["identity", "content", "auto", "off"]

_DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass
class SFPStats:
    """Counters of trunk calls: ``hits`` served from the cache, ``misses`` computed (and cached),
    ``bypasses`` computed without caching (cache off, or a stochastic trunk in training mode)."""

    hits: int = 0
    misses: int = 0
    bypasses: int = 0

    @property
    def calls(self) -> int:
        return self.hits + self.misses + self.bypasses

    @property
    def hit_rate(self) -> float:
        """Fraction of all trunk calls served from the cache (0.5 is the ceiling for policy+value pairs)."""
        return self.hits / self.calls if self.calls else 0.0

    def __add__(self, other: SFPStats) -> SFPStats:
        return SFPStats(self.hits + other.hits, self.misses + other.misses, self.bypasses + other.bypasses)

    def as_dict(self) -> dict[str, float]:
        return {"hits": self.hits, "misses": self.misses, "bypasses": self.bypasses, "hit_rate": self.hit_rate}


def _tensor_version(tensor: torch.Tensor) -> int | None:
    """The in-place version counter, or None for inference-mode tensors, which have none."""
    return None if tensor.is_inference() else tensor._version


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype | None]:
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        enabled = torch.is_autocast_enabled(device_type)
        return enabled, torch.get_autocast_dtype(device_type) if enabled else None
    if device_type == "cpu":
        enabled = torch.is_autocast_cpu_enabled()
        return enabled, torch.get_autocast_cpu_dtype() if enabled else None
    enabled = torch.is_autocast_enabled()
    return enabled, torch.get_autocast_gpu_dtype() if enabled else None


def _layout(tensor: torch.Tensor) -> tuple:
    return (tensor.shape, tensor.stride(), tensor.storage_offset(), tensor.dtype, tensor.device)


@dataclass
class _Entry:
    """One cached trunk call: the input it was computed from, the output, and the context it ran in."""

    input: torch.Tensor  # a reference, or a private copy when its version cannot be tracked
    input_version: int | None
    input_layout: tuple
    input_is_copy: bool
    output: torch.Tensor
    output_version: int | None
    context: tuple
    carries_graph: bool
    served: int = 0


class SingleForwardPass(nn.Module):
    """Wraps a trunk so that repeated calls on the same input in the same context compute it once.

    Use it inside a skrl model's ``compute()``: ``features = self.trunk(inputs["observations"])``; both
    roles call it, whichever comes first computes, the other is served.

    ``cache_check`` decides what "the same input" means:

    - ``"identity"``: the very same tensor object, unmodified (same ``_version``), same shape, stride,
      offset, dtype and device. Free: no tensor is read. Enough for skrl's PPO, which passes one dict to
      both roles.
    - ``"content"``: identity, else ``torch.equal`` with the cached input (for preprocessors that return a
      fresh tensor each call). Reads the input once; on CUDA this is one host sync per check.
    - ``"auto"``: identity first, then content. The default.
    - ``"off"``: never cache (the double-pass baseline); every call counts as a bypass.

    Besides the input, a hit requires the same grad mode, inference mode, autocast state and dtype,
    ``training`` flag, and the same trunk parameters and buffers (their version counters and storage:
    an optimizer step, ``load_state_dict`` or any in-place change invalidates).

    Lifetime: an entry that carries an autograd graph is served at most once and is dropped at the next
    call or mode change, so it never keeps a graph alive; a backward pass through its output drops it too
    (that backward frees the graph, which a later hit would hand out). A graph-free entry (no-grad
    rollouts, bootstrap values) may serve its pair partner and any further identical call until the next
    miss: sharing it cannot change a result, and it lets the time-limit bootstrap's lone value call on the
    next observations be reused by the next step's policy *and* value calls. The content check is tried only
    against an entry not yet served, so steady-state rollouts read no tensor to decide a miss.

    The contract: a hit never changes what the caller computes. Outputs equal the uncached trunk's
    bitwise; gradients equal it up to the order of floating-point summation at the trunk output (both
    heads' gradients are summed before one trunk backward instead of after two). Do not modify the
    returned features in place: both roles hold the same tensor.
    """

    def __init__(self, trunk: nn.Module, cache_check: CacheCheck = "auto") -> None:
        super().__init__()
        if cache_check not in CACHE_CHECKS:
            raise ValueError(f"cache_check={cache_check!r} is not one of {', '.join(CACHE_CHECKS)}")
        recurrent = [name or type(trunk).__name__ for name, m in trunk.named_modules() if isinstance(m, nn.RNNBase)]
        if recurrent:
            raise TypeError(
                f"SingleForwardPass cannot wrap a recurrent trunk ({', '.join(recurrent)}): its output depends on a "
                "hidden state that is not part of the input, so a cached result could be stale"
            )
        self.trunk = trunk
        self.cache_check: CacheCheck = cache_check
        self.stats = SFPStats()
        self._entry: _Entry | None = None
        self._stochastic_in_training = any(isinstance(m, _DROPOUT_TYPES) for m in trunk.modules())

    # -- public -----------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cache_check == "off" or (self._stochastic_in_training and self.training):
            self._entry = None
            self.stats.bypasses += 1
            return self.trunk(x)

        context = self._context(x)
        entry = self._entry
        if entry is not None:
            if entry.context == context and self._output_untouched(entry) and self._same_input(entry, x):
                self.stats.hits += 1
                entry.served += 1
                if entry.carries_graph:
                    self._entry = None
                return entry.output
            self._entry = None  # drop it before computing, so a stale graph is freed as early as possible

        output = self.trunk(x)
        self.stats.misses += 1
        self._entry = self._make_entry(x, output, context)
        if self._entry is not None and self._entry.carries_graph:
            output.register_hook(_drop_on_backward(self, self._entry))
        return output

    def clear(self) -> None:
        """Drop the cached entry (and any autograd graph it holds)."""
        self._entry = None

    def reset_stats(self) -> None:
        self.stats = SFPStats()

    def train(self, mode: bool = True) -> SingleForwardPass:
        self._entry = None
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .half(): parameters move, the entry is stale
        self._entry = None
        return super()._apply(fn, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"cache_check={self.cache_check!r}"

    # -- keys -------------------------------------------------------------------------------------------
    def _context(self, x: torch.Tensor) -> tuple:
        autocast, autocast_dtype = _autocast_state(x.device.type)
        return (
            torch.is_grad_enabled(),
            torch.is_inference_mode_enabled(),
            autocast,
            autocast_dtype,
            self.training,
            self._parameter_state(),
        )

    def _parameter_state(self) -> tuple:
        return tuple((t.data_ptr(), t._version) for t in self._tracked_tensors())

    def _tracked_tensors(self):
        yield from self.trunk.parameters()
        yield from self.trunk.buffers()

    def _same_input(self, entry: _Entry, x: torch.Tensor) -> bool:
        if _layout(x) != entry.input_layout:
            return False
        if (
            not entry.input_is_copy
            and x is entry.input
            and entry.input_version is not None
            and _tensor_version(x) == entry.input_version
        ):
            return True
        # A content check reads both tensors (a host sync on CUDA). Only an entry nobody has used yet is
        # worth it: once served, the pair it was made for is complete and the next input is new data.
        if self.cache_check == "identity" or entry.served:
            return False
        # the cached reference must itself be unmodified since the output was computed from it
        if not entry.input_is_copy and _tensor_version(entry.input) != entry.input_version:
            return False
        if not torch.equal(x, entry.input):
            return False
        version = _tensor_version(x)
        if version is not None:  # rebind to the caller's tensor, so its partner call hits by identity
            entry.input, entry.input_version, entry.input_is_copy = x, version, False
        return True

    @staticmethod
    def _output_untouched(entry: _Entry) -> bool:
        return entry.output_version is None or entry.output._version == entry.output_version

    def _make_entry(self, x: torch.Tensor, output: torch.Tensor, context: tuple) -> _Entry | None:
        if not isinstance(output, torch.Tensor):
            raise TypeError(f"SingleForwardPass expects the trunk to return one tensor, got {type(output).__name__}")
        version = _tensor_version(x)
        untrackable = version is None  # inference-mode input: it may change in place without a trace
        if untrackable and self.cache_check == "identity":
            return None
        return _Entry(
            input=x.clone() if untrackable else x,
            input_version=version,
            input_layout=_layout(x),
            input_is_copy=untrackable,
            output=output,
            output_version=_tensor_version(output),
            context=context,
            carries_graph=output.requires_grad,
        )


def _drop_on_backward(cache: SingleForwardPass, entry: _Entry):
    """A gradient hook on a cached output: once a backward reaches it, the graph behind it is freed (unless
    retained), so the entry must not be served again. Weak references only: no cycle keeps a graph alive."""
    cache_ref, entry_ref = weakref.ref(cache), weakref.ref(entry)

    def hook(grad: torch.Tensor) -> None:
        owner = cache_ref()
        if owner is not None and owner._entry is not None and owner._entry is entry_ref():
            owner._entry = None

    return hook


def sfp_modules(model: nn.Module) -> list[SingleForwardPass]:
    """All single-forward-pass caches inside ``model``."""
    return [m for m in model.modules() if isinstance(m, SingleForwardPass)]


def collect_stats(model: nn.Module) -> SFPStats:
    """The summed counters of every cache inside ``model``."""
    total = SFPStats()
    for module in sfp_modules(model):
        total = total + module.stats
    return total
