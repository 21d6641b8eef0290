"""omni_sfp.compute.device: keeping freed memory in a CPU training process (glibc's mallopt)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from omni_sfp.compute.device import keep_freed_memory

# Five training steps of the default Cartpole's network on a minibatch of 8192, in a fresh process (mallopt is
# process-wide), counting the minor page faults; argv[1] says whether keep_freed_memory runs first.
STEPS = """
import resource, sys, torch
from omni_sfp.compute.device import keep_freed_memory
from omni_sfp.sfp.network import make_mlp
torch.set_num_threads(1)
applied = keep_freed_memory(torch.device("cpu")) if sys.argv[1] == "keep" else False
net = make_mlp(4, (256, 128, 64))
optimizer = torch.optim.Adam(net.parameters(), fused=True)
data = torch.randn(8192, 4)
def step():
    optimizer.zero_grad()
    net(data).square().mean().backward()
    optimizer.step()
for _ in range(2):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True).stdout
    applied, faults = out.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_cpu_process_that_keeps_freed_memory_stops_faulting_it_back_in():
    applied, kept = page_faults("keep")
    _, default = page_faults("default")
    assert applied
    # measured: ~2.6k kept against ~26k (Zen 3) and 10k-26k (Zen 5) by default; a halving is the claim
    assert kept * 2 < default, (kept, default)


def test_nothing_is_changed_off_the_cpu():
    assert keep_freed_memory(torch.device("cuda")) is False
