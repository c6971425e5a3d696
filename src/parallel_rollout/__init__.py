"""parallel-rollout: agent rollouts in parallel over a shared pool of reset-able VMs."""

__version__ = "0.1.0"
