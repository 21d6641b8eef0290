"""The cache proven safe for recurrent trunks: random call sequences against an uncached twin.

As tests/test_cache_properties.py does for feed-forward trunks. Hypothesis draws sequences of what a trainer does
to a recurrent model (:mod:`omni_sfp.sfp.recurrent`, LSTM or GRU, before or after the MLP): policy and value calls
on one step of every env (the rollout) or on sequences with done masks (the update), each argument (observations,
every hidden state, the terminated and truncated masks) the same tensor, a clone, a fresh draw, a perturbed copy,
or the same tensor modified in place; under grad or no-grad; backward passes; optimizer steps (fused: no version
trace). The twin (cache off) keeps the same parameters. The key must cover every argument: a call with another
hidden state, done mask or sequence layout than the cached one is a miss, however equal the observations.

- Every output (log-probability, mean action, value, the hidden states after the call) equals the twin's bitwise.
- Every gradient equals the twin's within the summation-order bound (tests/tolerances.py).
- Both raise or neither does, with the same exception type (a backward through an input modified in place after
  a call saved it); then both start their gradients again, as tests/test_cache_properties.py does.
"""

from __future__ import annotations

import functools
from collections import Counter

import gymnasium
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tolerances import summation_order_bound

from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network
from omni_sfp.sfp.cache import SingleForwardPass

OBS, ACT, ENVS, LENGTH, HIDDEN = 3, 2, 2, 3, 4
settings.register_profile(
    "recurrent-ci",
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TALLY: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def report():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    print(f"\n[recurrent cache properties] {dict(TALLY)}")


SOURCES = ("same", "same", "same", "clone", "fresh", "perturbed", "inplace")
DONES = ("same", "same", "clone", "flipped", "none")  # "none": truncated not given
ARGUMENT = st.sampled_from(SOURCES)
calls = st.tuples(
    st.sampled_from(("call", "pair", "pair")),
    st.sampled_from(("policy", "value")),
    st.sampled_from(("rollout", "sequence")),
    ARGUMENT,  # observations
    ARGUMENT,  # hidden states
    st.sampled_from(DONES),
    st.sampled_from(("grad", "no_grad")),
)
operations = st.one_of(calls, calls, calls, st.tuples(st.just("backward")), st.tuples(st.just("step")))
KINDS = (("LSTM", True), ("LSTM", False), ("GRU", True))


@functools.cache
def models(cache_check: str, kind: tuple[str, bool]):
    cls, before_mlp = kind
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [5], "activations": "elu"}]
    spec = network.parse(
        {
            "rnn": {"class": cls, "hidden_size": HIDDEN, "sequence_length": LENGTH, "before_mlp": before_mlp},
            "policy": {"network": net},
            "value": {"network": net},
        }
    )
    box = gymnasium.spaces.Box

    def build(check: str):
        torch.manual_seed(0)
        model = sfp_models.build_models(
            spec, box(-1, 1, (OBS,)), box(-1, 1, (ACT,)), torch.device("cpu"), num_envs=ENVS, cache_check=check
        )
        return model["policy"]

    cached, twin = build(cache_check), build("off")
    return cached, twin, {k: v.clone() for k, v in cached.state_dict().items()}


class Arguments:
    """The current arguments of each layout (rollout, sequence), shared by the two models' calls."""

    def __init__(self, generator: torch.Generator, states: int) -> None:
        self.generator, self.states = generator, states
        self.current: dict[str, dict[str, object]] = {}

    def _fresh(self, layout: str, name: str) -> torch.Tensor:
        rows = ENVS if layout == "rollout" else ENVS * LENGTH
        if name == "observations":
            return torch.randn(rows, OBS, generator=self.generator)
        if name in ("terminated", "truncated"):
            return torch.rand(rows, 1, generator=self.generator) < 0.3
        return torch.randn(1, rows, HIDDEN, generator=self.generator)

    def draw(self, layout: str, observations: str, hidden: str, dones: str) -> dict[str, object]:
        now = self.current.setdefault(layout, {})
        names = ["observations", *(f"h{i}" for i in range(self.states))]
        if layout == "sequence":
            names += ["terminated", "truncated"]
        for name in names:
            how = observations if name == "observations" else hidden if name.startswith("h") else dones
            old = now.get(name)
            if old is None or how == "fresh":
                now[name] = self._fresh(layout, name)
            elif how == "clone":
                now[name] = old.clone()
            elif how == "perturbed":
                now[name] = old + 0.5 if old.is_floating_point() else old.logical_not()
            elif how == "flipped":
                flipped = old.clone()
                flipped[0] = ~flipped[0]
                now[name] = flipped
            elif how == "inplace":  # the same tensor, modified after the last call read it
                if old.is_floating_point():
                    old.add_(0.25)
                else:
                    old.logical_not_()
        inputs = {"observations": now["observations"], "rnn": [now[f"h{i}"] for i in range(self.states)]}
        if layout == "sequence":
            inputs["terminated"] = now["terminated"]
            if dones != "none":
                inputs["truncated"] = now["truncated"]
        return inputs


def act(model, role: str, inputs: dict, grad: str, seed: int):
    torch.default_generator.manual_seed(seed)  # the policy samples its actions: both models draw alike
    try:
        with torch.set_grad_enabled(grad == "grad"):
            if role == "policy":
                taken = torch.linspace(-0.5, 0.5, inputs["observations"].shape[0] * ACT).reshape(-1, ACT)
                _, out = model.act({**inputs, "taken_actions": taken}, role="policy")
                return [out["log_prob"], out["mean_actions"], *out["rnn"]]
            value, out = model.act(inputs, role="value")
            return [value, *out["rnn"]]
    except Exception as error:  # noqa: BLE001 (compared with the twin's)
        return type(error)


@given(
    cache_check=st.sampled_from(("auto", "identity", "content")),
    kind=st.sampled_from(KINDS),
    fused=st.booleans(),
    ops=st.lists(operations, min_size=1, max_size=16),
    seed=st.integers(0, 2**16),
)
@settings(settings.get_profile("recurrent-ci"))
def test_every_recurrent_output_and_gradient_matches_the_uncached_twin(cache_check, kind, fused, ops, seed):
    cached, twin, initial = models(cache_check, kind)
    for model in (cached, twin):
        model.load_state_dict(initial)
        model.train(True)
        model.zero_grad(set_to_none=True)
    cached.reset_sfp_stats()
    optimizer = torch.optim.Adam(cached.parameters(), lr=1e-2, fused=fused)
    arguments = Arguments(torch.Generator().manual_seed(seed), cached.rnn_spec.states)
    outputs: dict[str, list[torch.Tensor]] = {"cached": [], "twin": []}
    TALLY["sequences"] += 1
    for op in ops:
        TALLY["operations"] += 1
        if op[0] == "backward":
            losses = {k: sum((i + 1) * o.float().sum() for i, o in enumerate(v)) for k, v in outputs.items() if v}
            if not losses:
                continue
            errors = {}
            for key, loss in losses.items():
                try:
                    loss.backward()
                    errors[key] = None
                except Exception as error:  # noqa: BLE001
                    errors[key] = type(error)
            assert errors.get("cached") == errors.get("twin")
            outputs = {"cached": [], "twin": []}
            if errors.get("cached") is not None:  # both raised (an input modified in place after a call saved it):
                TALLY["equal exceptions"] += 1  # what each accumulated before raising depends on its graph's order
                for model in (cached, twin):
                    model.zero_grad(set_to_none=True)
                continue
            for (name, p), q in zip(cached.named_parameters(), twin.parameters()):
                if p.grad is None or q.grad is None:
                    assert p.grad is None and q.grad is None, name
                    continue
                difference = (p.grad - q.grad).abs().max().item()
                assert difference <= summation_order_bound(q.grad), f"gradient of {name} differs by {difference:.3g}"
            TALLY["gradient checks"] += 1
            continue
        if op[0] == "step":
            outputs = {"cached": [], "twin": []}
            if any(p.grad is not None for p in cached.parameters()):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            twin.zero_grad(set_to_none=True)
            twin.load_state_dict(cached.state_dict())  # the twin keeps the cached model's parameters
            continue
        what, role, layout, observations, hidden, dones, grad = op
        roles = [role, "value" if role == "policy" else "policy"] if what == "pair" else [role]
        inputs = arguments.draw(layout, observations, hidden, dones)
        for i, r in enumerate(roles):
            before = cached.sfp_stats.hits
            mine = act(cached, r, inputs, grad, seed + i)
            theirs = act(twin, r, inputs, grad, seed + i)
            TALLY["calls"] += 1
            TALLY["hits"] += cached.sfp_stats.hits - before
            if isinstance(theirs, type) or isinstance(mine, type):
                assert mine == theirs, f"{r}: {mine} vs {theirs}"
                continue
            for a, b in zip(mine, theirs):
                assert torch.equal(a, b), f"{r} on {layout}: an output differs from the uncached model's"
            if grad == "grad":
                outputs["cached"].append(mine[0])
                outputs["twin"].append(theirs[0])


def test_a_changed_hidden_state_or_done_mask_is_a_miss_and_the_pair_is_a_hit():
    """Hand-picked: the same observations with another hidden state (or another done mask, or the mask of the
    same values in a new tensor under identity checks) are computed; the value call after the policy call on the
    same arguments is served."""
    cached, _, initial = models("auto", ("LSTM", True))
    cached.load_state_dict(initial)
    cached.train(True)
    cached.reset_sfp_stats()
    cache: SingleForwardPass = cached.policy_trunk
    x = torch.randn(ENVS * LENGTH, OBS)
    h = [torch.zeros(1, ENVS * LENGTH, HIDDEN), torch.zeros(1, ENVS * LENGTH, HIDDEN)]
    done = torch.zeros(ENVS * LENGTH, 1, dtype=torch.bool)
    inputs = {"observations": x, "rnn": h, "terminated": done, "truncated": done}
    with torch.no_grad():
        cached.act(inputs, role="policy")
        cached.act(inputs, role="value")
        assert (cache.stats.hits, cache.stats.misses) == (1, 1)
        cached.act({**inputs, "rnn": [h[0] + 1, h[1]]}, role="value")  # another hidden state
        assert cache.stats.misses == 2
        ended = done.clone()
        ended[1] = True
        cached.act({**inputs, "terminated": ended}, role="value")  # another done mask
        assert cache.stats.misses == 3
        cached.act({**inputs, "truncated": None}, role="value")  # a mask left out
        assert cache.stats.misses == 4
        cached.act({"observations": x[:ENVS], "rnn": [s[:, :ENVS] for s in h]}, role="value")  # one step, not sequences
        assert cache.stats.misses == 5
