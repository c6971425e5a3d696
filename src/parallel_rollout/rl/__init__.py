"""RL front end: a RolloutScheduler that hands a trainer batches of grouped trajectories.

``from parallel_rollout.rl import RolloutScheduler, EnvManagerConfig`` — see ``scheduler``
for the scheduling, ``groups`` for what a trajectory holds, ``segments`` for its turns as
token sequences a trainer trains on, ``config`` for the settings and the task sets tags name,
``sources`` for the task order (a trainer's own ``TaskSource``), ``chosen`` for batches of
tasks the trainer names (``get_batch(tasks=…)``, ``get_batch(-1)``),
``policy_gate`` (below every agent) for weight updates (suspend/resume, policy versions),
``shared`` for the engine every scheduler of a trainer shares, ``run_folder`` for its locked
output folder and the sessions in it.
"""

from .budget import BatchTimeout
from .config import EnvManagerConfig, TaskSet, load_task_sets
from .groups import Trajectory, drop_equal_rewards
from .scheduler import ClusterLost, RolloutScheduler, SchedulerClosed, SchedulerSuspended
from .segments import NoTokenIds, Segment
from .sources import ShuffledTasks, TaskSource, TaskSourceError

__all__ = ["BatchTimeout", "ClusterLost", "EnvManagerConfig", "NoTokenIds", "RolloutScheduler", "SchedulerClosed",
           "SchedulerSuspended", "Segment", "ShuffledTasks", "TaskSet", "TaskSource", "TaskSourceError", "Trajectory", "drop_equal_rewards",
           "load_task_sets"]
