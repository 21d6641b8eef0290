"""PPO: :class:`~omni_sfp.ppo.agent.SFPPPO` (skrl's PPO subclassed: the update, explicit cache clears, device-side
episode statistics), the training loop where one iteration happens (:mod:`.loop`) and the observation and value
normaliser (:mod:`.scaler`).

May import :mod:`omni_sfp.config`, :mod:`omni_sfp.compute`, :mod:`omni_sfp.sfp`, :mod:`omni_sfp.envs` and the
embedded tasks (:mod:`omni_sfp.tasks`); never the run around it.
"""
