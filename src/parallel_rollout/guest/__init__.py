"""The guest side: the agent that runs inside every VM (``server`` and its ``agent_*`` and
``desktop*`` route modules), and the host's client of it (``client``)."""
