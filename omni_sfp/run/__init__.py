"""A run, from overrides to a run folder: compose and validate the config (:mod:`.compose`), build the pieces and
drive the loop (:mod:`.runner`), the run folder and resuming (:mod:`.folder`), the checkpoint file
(:mod:`.checkpoint`), progress and the summary (:mod:`.progress`), and what a run leaves behind (:mod:`.outputs`).

The top of the core: may import every part below it (config, compute, sfp, envs, ppo), never the Kit side or the
benchmark.
"""
