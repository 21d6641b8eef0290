"""Where and how the arithmetic runs: the device (:mod:`.device`), the processes of a multi-process run
(:mod:`.distributed`), the CPU's kernel choices measured per CPU kind (:mod:`.kernels`, :mod:`.cpu_choices`),
torch.compile's pay-back policy (:mod:`.compile_policy`) and the clipped optimizer step (:mod:`.optim`).

May import :mod:`omni_sfp.config` only: no model, no agent, no task.
"""
