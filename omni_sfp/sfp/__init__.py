"""The single forward pass, the product's heart: the keyed trunk cache (:mod:`.cache`), the shared
actor-critic and its separate baseline (:mod:`.models`), and the builder of models from a task's registered
network spec, skrl's YAML or rl_games' ``network`` block (:mod:`.network`).

May import :mod:`omni_sfp.config` and :mod:`omni_sfp.compute`; knows nothing of PPO, tasks or runs.
"""
