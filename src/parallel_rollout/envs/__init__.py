"""Environments, one module per mode, behind the ``Env`` interface (see ``base``)."""

from .base import Env, StepResult
from .registry import (answer_files_of, get_env, mode_names, run_answer_files, run_task_set, task_answer_files,
                       task_validators, with_mode_defaults)

__all__ = ["Env", "StepResult", "answer_files_of", "get_env", "mode_names", "run_answer_files", "run_task_set",
           "task_answer_files", "task_validators", "with_mode_defaults"]
