"""``python -m omni_sfp.schema --write | --check``: regenerate, or list, the files written from the settings.

The settings themselves are defined in :mod:`omni_sfp.config.schema`; the writer is :mod:`omni_sfp.config.generated`.
"""

import sys

from omni_sfp.config.generated import main

if __name__ == "__main__":
    sys.exit(main())
