"""RL front end: a RolloutScheduler that hands a trainer batches of grouped trajectories.

``config``: EnvManagerConfig (ROLL's env manager settings) and the task sets tags name;
``gate``: weight updates (suspend/resume, policy versions).
"""

from .config import EnvManagerConfig, TaskSet, load_task_sets

__all__ = ["EnvManagerConfig", "TaskSet", "load_task_sets"]
