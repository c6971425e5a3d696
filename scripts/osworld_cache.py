"""Fill or inspect the osworld download cache for a machine without internet: the CLI's
``osworld-cache`` command (``parallel-rollout osworld-cache where|put|missing …``), kept here
for a checkout's users. See ``parallel_rollout/envs/osworld/cache_tool.py``."""

import sys

from parallel_rollout.envs.osworld.cache_tool import main

if __name__ == "__main__":
    sys.exit(main(prog="osworld_cache.py"))
