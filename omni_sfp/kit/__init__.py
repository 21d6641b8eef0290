"""The Kit side: the extension (:mod:`.extension`, which Kit imports: extension.toml ``[[python.module]]``), its
settings bridge (:mod:`.settings`) and panel (:mod:`.panel`), both over omni.* and carb; and, in the standard
library only, the panel's view-model (:mod:`.panel_model`) and the training subprocess (:mod:`.launcher`).

Training runs as a subprocess of ``python -m omni_sfp.train``, so nothing here imports torch or skrl: this part
may import :mod:`omni_sfp.config` and :mod:`omni_sfp.envs` (the task list) only. This ``__init__`` imports
nothing, so the view-model is usable outside Kit.
"""
