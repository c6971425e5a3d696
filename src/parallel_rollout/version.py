"""The version of parallel-rollout, read by the package's face (``__init__``) and by the run's
provenance (``config.json``): a module of its own at the bottom, so the face sits above all."""

__version__ = "0.1.0"
