"""What a run leaves besides checkpoints and progress, each a :class:`~omni_sfp.run.outputs.base.RunOutput`
plugged into the run at the same points: video clips (:mod:`.video`), the exported policy (:mod:`.export`),
W&B (:mod:`.wandb_logging`), the learning curve (:mod:`.plots`) and the final evaluation (:mod:`.evaluation`).

Part of :mod:`omni_sfp.run`; the runner keeps a list of them (:func:`.base.outputs_for`).
"""
