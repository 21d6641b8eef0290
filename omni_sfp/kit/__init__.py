"""Everything of omni-sfp that imports ``omni.*`` or ``carb``: the Kit extension, its settings bridge, its panel.

Kit imports this module (extension.toml ``[[python.module]]``) and starts every ``omni.ext.IExt`` subclass
found here. Nothing here imports torch or skrl.
"""

from omni_sfp.kit.extension import OmniSfpExtension, get_instance

__all__ = ["OmniSfpExtension", "get_instance"]
