"""The embedded GPU-resident tasks: pure torch, one file each, built on :class:`~omni_sfp.tasks.base.VecTask`.

Installed as ``omni_sfp.tasks``; they are registered by entry point in :mod:`omni_sfp.envs.registry`, so importing
this package loads no task module.
"""
