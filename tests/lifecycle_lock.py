"""A plugin module whose import takes an exclusive lock on $LIFE_LOCK and keeps it (a common
cache or database pattern): the CLI imports it first, the workers' server then waits for ever.
With $LIFE_SLOW, its import takes that many seconds in the workers' server instead."""

import fcntl
import os
import sys
import time

if os.environ.get("LIFE_SLOW") and sys.argv[0] == "-c":  # the server: python -c 'from multiprocessing…'
    time.sleep(float(os.environ["LIFE_SLOW"]))
if os.environ.get("LIFE_LOCK"):
    _held = open(os.environ["LIFE_LOCK"], "w")
    fcntl.flock(_held, fcntl.LOCK_EX)

from lifecycle_plugins import SpawnsAndReturns as Locked  # noqa: E402,F401
