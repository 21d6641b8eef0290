"""``python -m omni_sfp.list_tasks [--kind KIND] [--json]``: every task ``task=`` accepts, with its sizes and the
source of its config. The listing is :mod:`omni_sfp.envs.listing`."""

import sys

from omni_sfp.envs.listing import main

if __name__ == "__main__":
    sys.exit(main())
