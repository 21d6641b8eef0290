"""Configuration: every setting defined once (:mod:`.schema`), the panel's toggles over them (:mod:`.toggles`),
what two settings decide together (:mod:`.values`) and the files written from them (:mod:`.generated`).

The bottom of the package: standard library only, so the Kit extension and the panel read it without torch,
skrl or Hydra. It imports nothing else of omni_sfp. Composing and validating a run's config, which needs the
tasks and the network builder, is :mod:`omni_sfp.run.compose`.
"""
