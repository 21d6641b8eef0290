"""The benchmark: ``python -m omni_sfp.bench <command>`` (``table``: the timing table against rl_games and skrl;
``quality``, ``pixels``, ``coldstart``, ``env-overhead``, ``soak``, ``gpu``: :mod:`omni_sfp.bench.__main__`).

The table's parts: ``configs`` (the equal work, presets, rows), ``envs`` and ``replay`` (what every row
trains on), ``omni``, ``skrl_builtin``, ``rlgames``, ``bare_ppo`` and ``floor`` (one per kind of row), ``worker`` (one
timed run in a fresh process), ``timing`` (interleaving), ``report`` (ratios and outputs), ``quality``
(seeds and t-tests). Nothing here is imported by the training code.
"""
