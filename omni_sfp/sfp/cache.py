"""The keyed single-forward-pass cache for a shared trunk.

skrl calls a shared policy/value model twice on the same input (role "policy", then "value"). Running
the trunk once and serving the second call from a cache removes a whole forward and, because both heads
then hang off one trunk output, a whole backward. The cache here is safe where skrl's built-in one is
not: an entry is served only when the input *and* everything else that changes the trunk's result is the
same as when it was computed (see ``SingleForwardPass``). It knows torch, not skrl.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn.modules import module as _module_globals
from torch.optim.optimizer import register_optimizer_step_post_hook

from omni_sfp.compute.kernels import transform_active
from omni_sfp.config.schema import CACHE_CHECKS  # defined once, with every setting

CacheCheck = Literal["identity", "content", "auto", "off"]

_PLAIN_TENSOR_TYPES = (torch.Tensor, nn.Parameter)

# -- the global generation: every optimizer step in the process invalidates every cache ----------------------
# Fused optimizers (torch.optim.Adam/AdamW/SGD(fused=True), our default) write the parameters without bumping
# their version counters, so versions alone cannot see a step. torch runs the global step post-hooks after
# every Optimizer.step(), fused or not; bumping a counter there costs one integer add per step and makes
# every entry computed before the step a miss. Invalidating the caches of models the optimizer does not own
# costs at most one recomputation each: conservative, never wrong.
_generation = 0


def invalidate_all_caches() -> None:
    """Make every cache in the process miss once: for writes the cache cannot see in any model (``.data``
    edits, parameters shared with code that edits them in place without autograd, numerics flags)."""
    global _generation
    _generation += 1


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    invalidate_all_caches()


_OPTIMIZER_HOOK = register_optimizer_step_post_hook(_on_optimizer_step)


class SharedGraphBackwardError(RuntimeError):
    """A second backward reached a trunk output that two calls shared, after an earlier backward freed it."""


@dataclass
class SFPStats:
    """Counters of trunk calls: ``hits`` served from the cache, ``misses`` computed (and cached),
    ``bypasses`` computed without caching (cache off, a trunk that drew random numbers, hooks on the trunk,
    an active ``torch.func`` transform or forward-mode AD)."""

    hits: int = 0
    misses: int = 0
    bypasses: int = 0

    @property
    def calls(self) -> int:
        return self.hits + self.misses + self.bypasses

    @property
    def hit_rate(self) -> float:
        """Hits per trunk call (the runner reports hits per *shareable* call: ``SFPPPO.sfp_share_rate``)."""
        return self.hits / self.calls if self.calls else 0.0

    def __add__(self, other: SFPStats) -> SFPStats:
        return SFPStats(self.hits + other.hits, self.misses + other.misses, self.bypasses + other.bypasses)

    def __sub__(self, other: SFPStats) -> SFPStats:
        return SFPStats(self.hits - other.hits, self.misses - other.misses, self.bypasses - other.bypasses)


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


def _has_global_hooks() -> bool:
    return bool(
        _module_globals._global_forward_hooks
        or _module_globals._global_forward_pre_hooks
        or _module_globals._global_backward_hooks
        or _module_globals._global_backward_pre_hooks
    )


def _rng_snapshot(device: torch.device) -> tuple:
    """The state of every generator the trunk can draw from by default: the CPU generator's full state
    (bytes: a memcmp, no tensor op) and, for a CUDA input, that device's Philox offset (a host integer,
    no sync). Taken around a miss: if it moved, the trunk drew random numbers and its result must not be
    shared (each role draws its own, as in the double pass). Cost, measured on this project's CPU: about
    1 us per ``get_state`` plus a 5 KB ``memcmp``, twice per miss and never on a hit (``torch.equal`` on the
    state tensors took 4.5 us). Deciding once per mode would be cheaper but would miss a trunk that draws on
    some calls only; a module-type list misses ``F.dropout``, RReLU and noisy layers."""
    state = torch.default_generator.get_state()
    cpu = ctypes.string_at(state.data_ptr(), state.numel())
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return cpu, torch.cuda.default_generators[index].get_offset()
    return (cpu,)


@dataclass(eq=False)
class _Guard:
    """Shared by a graph-carrying entry and the gradient hook on its output; holds nothing of the graph.

    ``shared``: the output was served to a second call, so two losses hang off one trunk graph. ``task``:
    the autograd graph task that last reached the output."""

    shared: bool = False
    task: int | None = None


@dataclass(eq=False)
class _Input:
    """One input of a cached call (a recurrent trunk has several: the input, its hidden state, its done mask)."""

    ref: weakref.ref  # identity of the caller's tensor, without keeping it (or its graph) alive
    data: torch.Tensor | None  # detached alias (shares the version counter) or private copy, for content
    version: int | None
    layout: tuple


@dataclass(eq=False)
class _Entry:
    """One cached trunk call: the inputs it was computed from, the output, and the state it ran in."""

    inputs: tuple  # an _Input per tensor argument, None where the argument was None
    output: torch.Tensor | tuple  # one tensor, or a tuple of tensors (a recurrent trunk's features and hidden state)
    output_version: tuple  # per output tensor
    private_output: bool  # an inference-mode output: a private copy, served as a fresh copy, once
    context: tuple
    refs: tuple  # weak references to the trunk's modules, parameters and buffers, in walk order
    state: tuple  # their data pointers, versions, requires_grad and training flags
    carries_graph: bool
    guard: _Guard | None = None
    served: int = 0


class SingleForwardPass(nn.Module):
    """Wraps a trunk so that repeated calls on the same input in the same state compute it once.

    Use it inside a skrl model's ``compute()``: ``features = self.trunk(inputs["observations"])``; both
    roles call it, whichever comes first computes, the other is served.

    A trunk may take several tensor arguments (or None) and return a tuple of tensors: a recurrent trunk that
    declares ``hidden_state_input = True`` takes ``(x, *hidden, dones)`` and returns ``(features, *hidden)``
    (:mod:`omni_sfp.sfp.recurrent`). Every argument is then part of the key, each checked as below: the same
    input with another hidden state, done mask or sequence shape is a miss. A recurrent trunk that reads a
    hidden state kept inside it (``nn.LSTM`` called without one) is refused.

    ``cache_check`` decides what "the same input" means:

    - ``"identity"``: the very same tensor object, unmodified (same ``_version``), same shape, stride,
      offset, dtype and device. Free: no tensor is read. Enough for skrl's PPO, which passes one dict to
      both roles.
    - ``"content"``: identity, else ``torch.equal`` with the cached input (for preprocessors that return a
      fresh tensor each call). Reads the input once; on CUDA this is one host sync per check.
    - ``"auto"``: identity first, then content. The default.
    - ``"off"``: never cache (the double-pass baseline); every call counts as a bypass.

    Besides the input, a hit requires the same state, all read from metadata (no tensor data):

    - grad mode, inference mode, autocast state and dtype, ``torch.get_float32_matmul_precision()``;
    - the input's autograd state: an input that requires grad (a leaf or the output of an encoder) is
      served only to the very same tensor object, never by content, so gradients reach the caller's graph;
    - the trunk's modules, parameters and buffers, each by identity (a weak reference: a dead or replaced
      object is a miss, so freed-and-reused memory can never look like the old parameter), data pointer,
      version counter and ``requires_grad``, and every module's ``training`` flag;
    - the process-wide optimizer generation: every ``Optimizer.step()``, fused or not, invalidates.

    Calls that cannot be shared run the trunk as written and count as bypasses: ``cache_check="off"``, an
    active ``torch.func`` transform or forward-AD level, a trunk with module hooks (they observe every
    call), an input of a tensor subclass, and any call during which the trunk drew random numbers (the
    default generators' state is compared across each miss: dropout, RReLU, noisy layers, ``F.dropout``
    anywhere, found by what they do rather than by a list of types).

    Lifetime: an entry that carries an autograd graph is served at most once and is dropped at the next
    call or mode change, so it never keeps a graph alive; a backward pass through its output drops it too.
    A graph-free entry (no-grad rollouts, bootstrap values) may serve its pair partner and any further
    identical call until the next miss; it keeps no reference to the caller's input (a weak reference for
    identity, a detached alias for one content check, dropped once served). An inference-mode output has no
    version counter, so an in-place edit by a head could not be seen: such an entry keeps a private copy
    and serves a fresh copy of it to its immediate partner only.

    Inside ``torch.compile`` (a captured PPO step, :mod:`omni_sfp.ppo.step`) none of this runs: the keys are
    Python state that a graph cannot hold. There the cache serves the second call *within one traced call* by
    tensor identity, under the same grad mode and autocast state, and forgets the entry when the traced function
    calls :meth:`end_graph` (a graph's entry never outlives its call). What the host-side key covers beyond
    that (parameters replaced, training flags, hooks, a trunk that draws random numbers) is checked outside the
    graph by the capture itself (:func:`capture_key`, and an eager first step whose hit proves the pair shares).

    If two losses hang off one shared output and each gets its own backward, the second backward finds the
    trunk's graph freed; this raises :class:`SharedGraphBackwardError` naming the remedies (sum the losses,
    ``retain_graph=True``, or ``clear()`` between the calls). What the cache cannot see at all (``.data``
    writes, memory written behind the version counter by numpy/DLPack/warp, non-tensor module state) needs
    ``clear()`` or :func:`invalidate_all_caches`; the README lists each case.

    The contract: a hit never changes what the caller computes. Outputs equal the uncached trunk's
    bitwise; gradients equal it up to the order of floating-point summation at the trunk output (both
    heads' gradients are summed before one trunk backward instead of after two).
    """

    def __init__(self, trunk: nn.Module, cache_check: CacheCheck = "auto") -> None:
        super().__init__()
        if cache_check not in CACHE_CHECKS:
            raise ValueError(f"cache_check={cache_check!r} is not one of {', '.join(CACHE_CHECKS)}")
        recurrent = [name or type(trunk).__name__ for name, m in trunk.named_modules() if isinstance(m, nn.RNNBase)]
        if recurrent and not getattr(trunk, "hidden_state_input", False):
            raise TypeError(
                f"SingleForwardPass cannot wrap a recurrent trunk ({', '.join(recurrent)}): its output depends on a "
                "hidden state that is not part of the input, so a cached result could be stale"
            )
        self.trunk = trunk
        self.cache_check: CacheCheck = cache_check
        self.stats = SFPStats()
        self._entry: _Entry | None = None
        self._graph_entry: tuple | None = None  # (inputs, modes, output) inside one traced call

    # -- public -----------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, *more: torch.Tensor | None) -> torch.Tensor | tuple:
        inputs = (x, *more)
        if torch.compiler.is_compiling():
            return self._in_graph(inputs)
        if (
            self.cache_check == "off"
            or any(t is not None and type(t) not in _PLAIN_TENSOR_TYPES for t in inputs)
            or transform_active()
        ):
            return self._bypass(inputs)
        walked = self._walk()
        if walked is None:  # hooks on the trunk
            return self._bypass(inputs)
        objects, state = walked
        context = self._context(inputs)
        entry = self._entry
        if entry is not None:
            # metadata first: a content check (a tensor read) is only made when everything else matches
            if self._same_state(entry, context, objects, state) and self._same_inputs(entry, inputs):
                return self._serve(entry)
            self._entry = None  # drop it before computing, so a stale graph is freed as early as possible

        before = _rng_snapshot(x.device)
        output = self.trunk(*inputs)
        outputs = output if isinstance(output, tuple) else (output,)
        if not outputs or not all(isinstance(t, torch.Tensor) for t in outputs):
            raise TypeError(
                f"SingleForwardPass expects the trunk to return a tensor or a tuple of tensors, got {type(output).__name__}"
            )
        if _rng_snapshot(x.device) != before:  # the trunk drew random numbers: its result is not shareable
            self.stats.bypasses += 1
            return output
        self.stats.misses += 1
        self._entry = self._make_entry(inputs, output, context, objects, state)
        return output

    def clear(self) -> None:
        """Drop the cached entry (and any autograd graph it holds)."""
        self._entry = None
        self._graph_entry = None

    def end_graph(self) -> None:
        """The end of a traced call: its entry must not reach the next one (which has other tensors)."""
        self._graph_entry = None

    def reset_stats(self) -> None:
        self.stats = SFPStats()

    def train(self, mode: bool = True) -> SingleForwardPass:
        self.clear()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .half(): parameters move, the entry is stale
        self.clear()
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self) -> dict:
        """``copy.deepcopy``, ``pickle`` and ``torch.save`` of the module carry no entry (a cached batch, or
        a graph that cannot be copied)."""
        state = self.__dict__.copy()
        state["_entry"] = state["_graph_entry"] = None
        return state

    def extra_repr(self) -> str:
        return f"cache_check={self.cache_check!r}"

    # -- calls ------------------------------------------------------------------------------------------
    def _in_graph(self, inputs: tuple) -> torch.Tensor | tuple:
        """The trunk under ``torch.compile``: the second call on the very same traced tensor, in the same grad mode
        and autocast state, gets the first call's output, so the graph holds one trunk and one backward through
        it. No counter moves here (a Python integer in a graph would be a guard that recompiles on every call):
        whoever runs the compiled function counts what its eager twin counted."""
        modes = (torch.is_grad_enabled(), *_autocast_state(inputs[0].device.type))
        entry = self._graph_entry
        if (
            self.cache_check != "off"
            and entry is not None
            and len(entry[0]) == len(inputs)
            and all(a is b for a, b in zip(entry[0], inputs))
            and entry[1] == modes
        ):
            return entry[2]
        output = self.trunk(*inputs)
        if self.cache_check != "off":
            self._graph_entry = (inputs, modes, output)
        return output

    def _bypass(self, inputs: tuple) -> torch.Tensor | tuple:
        self._entry = None
        self.stats.bypasses += 1
        return self.trunk(*inputs)

    def _serve(self, entry: _Entry) -> torch.Tensor | tuple:
        self.stats.hits += 1
        entry.served += 1
        for item in entry.inputs:  # no content check after the first serve: let the inputs go
            if item is not None:
                item.data = None
        if entry.private_output:
            self._entry = None  # the immediate partner only
            if isinstance(entry.output, tuple):
                return tuple(t.clone() for t in entry.output)
            return entry.output.clone()
        if entry.carries_graph:
            self._entry = None
            entry.guard.shared = True
        return entry.output

    # -- keys -------------------------------------------------------------------------------------------
    def _context(self, inputs: tuple) -> tuple:
        grad = torch.is_grad_enabled()
        autocast, autocast_dtype = _autocast_state(inputs[0].device.type)
        return (
            _generation,
            grad,
            torch.is_inference_mode_enabled(),
            autocast,
            autocast_dtype,
            torch.get_float32_matmul_precision(),
            grad and any(t is not None and t.requires_grad for t in inputs),  # the graph must lead to them
        )

    def _walk(self) -> tuple[list, tuple] | None:
        """The trunk's modules, parameters and buffers (objects) and their metadata (state), read fresh on
        every call; None if any module hook is registered (hooks see every call: the cache must not elide
        one)."""
        return _walk(self.trunk, versions=True)

    @staticmethod
    def _same_state(entry: _Entry, context: tuple, objects: list, state: tuple) -> bool:
        if entry.context != context or entry.state != state or len(entry.refs) != len(objects):
            return False
        outputs = entry.output if isinstance(entry.output, tuple) else (entry.output,)
        for output, version in zip(outputs, entry.output_version):
            if version is not None and output._version != version:
                return False  # the caller modified the returned features in place
        return all(ref() is obj for ref, obj in zip(entry.refs, objects))

    def _same_inputs(self, entry: _Entry, inputs: tuple) -> bool:
        """Every argument the same (by identity, else content): all must hold, in order; identity first for all,
        so that a content check (a tensor read) is made only where every other argument already matched."""
        if len(inputs) != len(entry.inputs):
            return False
        pending = []
        for item, x in zip(entry.inputs, inputs):
            if item is None or x is None:
                if item is not x:  # a None argument matches only None
                    return False
                continue
            if _layout(x) != item.layout:
                return False
            version = _tensor_version(x)
            if not (version is not None and version == item.version and item.ref() is x):
                pending.append((item, x))
        return all(self._same_input(item, x) for item, x in pending)

    def _same_input(self, item: _Input, x: torch.Tensor) -> bool:
        version = _tensor_version(x)
        # A content check reads both tensors (a host sync on CUDA). Only an entry nobody has used yet is
        # worth it: once served, the pair it was made for is complete and the next input is new data.
        # An input that requires grad is served by identity only: a content hit would hand it a graph
        # that leads to another tensor.
        if self.cache_check == "identity" or item.data is None or x.requires_grad:
            return False
        # the cached data must itself be unmodified since the output was computed from it
        if item.version is not None and item.data._version != item.version:
            return False
        if not torch.equal(x, item.data):
            return False
        if version is not None:  # rebind to the caller's tensor, so its partner call hits by identity
            item.ref, item.version = weakref.ref(x), version
        return True

    def _make_input(self, x: torch.Tensor) -> _Input | None:
        version = _tensor_version(x)
        untrackable = version is None  # inference-mode input: it may change in place without a trace
        if untrackable and self.cache_check == "identity":
            return None
        data = x.clone() if untrackable else (None if self.cache_check == "identity" else x.detach())
        return _Input(weakref.ref(x), data, version, _layout(x))

    def _make_entry(self, inputs: tuple, output, context: tuple, objects: list, state: tuple) -> _Entry | None:
        items = tuple(None if x is None else self._make_input(x) for x in inputs)
        if any(item is None and x is not None for item, x in zip(items, inputs)):
            return None  # an inference-mode argument under identity checks: nothing to key it by
        outputs = output if isinstance(output, tuple) else (output,)
        output_version = tuple(_tensor_version(t) for t in outputs)
        private_output = any(v is None for v in output_version)
        if private_output:
            outputs = tuple(t.clone() for t in outputs)
            output = outputs if isinstance(output, tuple) else outputs[0]
        entry = _Entry(
            inputs=items,
            output=output,
            output_version=output_version,
            private_output=private_output,
            context=context,
            refs=tuple(weakref.ref(obj) for obj in objects),
            state=state,
            carries_graph=any(t.requires_grad for t in outputs),
        )
        if entry.carries_graph:
            entry.guard = _Guard()
            hooked = next(t for t in outputs if t.requires_grad)  # the features: what the heads' losses reach
            hooked.register_hook(_on_backward(self, entry, entry.guard))
        return entry


def _walk(root: nn.Module, *, versions: bool) -> tuple[list, tuple] | None:
    """``root``'s modules, parameters and buffers (objects) and their metadata (state): each module's training
    flag, each tensor's data pointer, (``versions``) version counter and ``requires_grad``; None if a module hook
    is registered anywhere. Written for speed: the cache walks its trunk twice a rollout step."""
    if _has_global_hooks():
        return None
    objects: list = []
    state: list = []
    keep, note = objects.append, state.append
    stack = [root]
    while stack:
        module = stack.pop()
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks:
            return None
        keep(module)
        note(module.training)
        for tensors in (module._parameters, module._buffers):
            for tensor in tensors.values():
                if tensor is not None:
                    keep(tensor)
                    note(tensor.data_ptr())
                    if versions:
                        note(None if tensor.is_inference() else tensor._version)
                    note(tensor.requires_grad)
        if module._modules:
            stack.extend(child for child in module._modules.values() if child is not None)
    return objects, tuple(state)


def capture_key(*modules: nn.Module) -> tuple[tuple, list] | None:
    """What a captured step fixed when it was captured, read from metadata alone, and the objects it names:
    every module, parameter and buffer by identity and data pointer (a CUDA graph reads the addresses it was
    recorded with), their ``requires_grad``, every training flag and ``torch.get_float32_matmul_precision()``.
    Unlike the cache's key it leaves out the version counters: a step moves the parameters in place, and the
    next replay must read them. Keep the objects while the key is in use, so no identity can be reused. None
    while any module hook is registered (a graph replays no hook)."""
    key: list = [torch.get_float32_matmul_precision()]
    alive: list = []
    for module in modules:
        walked = _walk(module, versions=False)
        if walked is None:
            return None
        objects, state = walked
        key += [tuple(map(id, objects)), state]
        alive += objects
    return tuple(key), alive


def _on_backward(cache: SingleForwardPass, entry: _Entry, guard: _Guard):
    """A gradient hook on a cached output with a graph. A backward reaching it frees the graph behind it
    (unless retained), so the entry must not be served again. If the output was shared by two calls and a
    second backward arrives after the first freed the graph, raise a clear error instead of autograd's
    "backward through the graph a second time". Weak references only: no cycle keeps a graph alive."""
    cache_ref, entry_ref = weakref.ref(cache), weakref.ref(entry)

    def hook(grad: torch.Tensor) -> None:
        owner = cache_ref()
        if owner is not None and owner._entry is not None and owner._entry is entry_ref():
            owner._entry = None
        task = torch._C._current_graph_task_id()
        earlier, guard.task = guard.task, task
        if guard.shared and earlier is not None and earlier != task:
            node = torch._C._current_autograd_node()  # the output's grad_fn, whose pre-hook this is
            if node is not None and _graph_freed(node):
                raise SharedGraphBackwardError(
                    "SingleForwardPass: the policy and value calls shared one trunk output (a cache hit) and an "
                    "earlier backward freed its graph; sum the losses into one backward (as PPO does), pass "
                    "retain_graph=True to the first backward, or call clear() between the two calls"
                )

    return hook


def _graph_freed(node, limit: int = 64) -> bool:
    """Whether the autograd graph below ``node`` was freed: its saved tensors can no longer be read. Only
    called on the error path (a second backward through a shared output)."""
    seen, queue = set(), [node]
    while queue and len(seen) < limit:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name in dir(node):
            if name.startswith("_raw_saved_"):  # a saved tensor (scalars saved as _saved_* are never freed)
                field = name[len("_raw_saved_") :]
                try:  # built-in nodes read it as _saved_<field>, custom autograd.Function nodes as saved_tensors
                    getattr(node, "_saved_" + field) if hasattr(type(node), "_saved_" + field) else node.saved_tensors
                except RuntimeError as error:  # freed, or modified in place (autograd reports that one itself)
                    return "freed" in str(error)
                return False  # a saved tensor is still readable: the graph is retained
        queue.extend(child for child, _ in node.next_functions)
    return False


def sfp_modules(model: nn.Module) -> list[SingleForwardPass]:
    """All single-forward-pass caches inside ``model``."""
    return [m for m in model.modules() if isinstance(m, SingleForwardPass)]


def clear_caches(model: nn.Module) -> int:
    """Drop the entry of every cache inside ``model`` (at an update boundary, after a ``.data`` write or an
    external write to an input buffer); returns how many caches there are."""
    caches = sfp_modules(model)
    for cache in caches:
        cache.clear()
    return len(caches)


def collect_stats(model: nn.Module) -> SFPStats:
    """The summed counters of every cache inside ``model``."""
    total = SFPStats()
    for module in sfp_modules(model):
        total = total + module.stats
    return total
