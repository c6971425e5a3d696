"""The settings a run honours: one that applies only to some modes, agents or providers
(``screen_width`` to a desktop mode, ``agent_cmd`` to the command agent, ``vm_memory_mb`` to a
mode that runs in a VM …), given for a run where nothing uses it, is refused rather than
ignored. ``setting_users`` says who uses each such setting in a run of one mode, agent and
provider; ``check_honoured`` refuses those given with no user. The batch runner
(``Runner.prepare``) checks its run so, the RL scheduler each of its tags (``rl.config``).
"""

from __future__ import annotations

import logging
from typing import Any

from .agents.base import MODEL_OPTIONS
from .errors import ConfigError
from .setting_names import FLAGLESS, RESUME_READS, flag_name, setting_name

log = logging.getLogger("parallel_rollout")

#: who takes the model settings (--model, --base-url …), for the error that refuses them
_MODEL_AGENTS = "agents that call a model (openai, or a module:Class agent through self.model)"
#: the settings of a desktop mode's VM and its observations
_DESKTOP = ("action_space", "screen_width", "screen_height", "client_password", "observation_type",
            "sleep_after_execution", "record")
#: the settings of a VM, honoured by every mode that runs in one
_VM = ("vm_memory_mb", "vm_max_processes", "provider_name", "snapshot_name", "path_to_vm", "num_vms", "use_vm_pool")
#: the settings of the remote provider's machines
_REMOTE = ("vm_address", "vm_key_file", "reset_command")

#: who uses a setting: (who would, the things of this run that do)
Users = dict[str, tuple[str, frozenset[str]]]


def setting_users(env_cls: Any, agent_cls: Any, provider: str | None) -> Users:
    """Who uses each situational setting in a run of mode ``env_cls`` by agent ``agent_cls``
    on ``provider`` (the name of its VMs' provider; None: the mode runs in no VM): (who would,
    the set of things in this run that do: empty when nothing does)."""
    env_opts, agent_opts = env_cls.options, agent_cls.options
    vm = frozenset({"vm"} if provider is not None else ())
    return {
        **{name: ("desktop modes (osworld)", env_opts & {name}) for name in _DESKTOP},
        "rag_metric": ("the rag mode", env_opts & {"rag_metric"}),
        **{name: (_MODEL_AGENTS, agent_opts & {name}) for name in MODEL_OPTIONS},
        "tool_calls": ("the openai agent", agent_opts & {"tool_calls"}),
        "agent_cmd": ("the command agent", agent_opts & {"agent_cmd"}),
        **{name: ("modes that run in a VM", vm) for name in _VM},
        **{name: ("the remote provider", frozenset({"remote"} if provider == "remote" else ())) for name in _REMOTE},
    }


def check_honoured(cfg: Any, owners: Users, run: str = "this run") -> None:
    """Reject explicit settings nobody in this run uses.

    ``owners`` maps a situational field to (who would use it, the set of things in this run
    that do); an explicit field with an empty user set is an error that says who needs it
    (a warning when a resume read it from the run's config.json: the run was started with it).
    ``run``: what the error says is not using it."""
    for name, (needed_by, users) in owners.items():
        if name in cfg.explicit and not users:
            flag = f"the setting {setting_name(cfg, name)}" if name in FLAGLESS else flag_name(cfg, name)
            # a model's setting with no --agent (a script written for OSWorld's run.py, whose
            # agent is the model's): the agent that ignores it is the default one, not chosen;
            # one given (--agent oracle, a trainer's agent="oracle") is said without "the default"
            default = "" if "agent" in cfg.explicit else ", the default"
            agent = (f"; this run's agent is {cfg.agent}{default}: --agent openai calls the model"
                     if name in MODEL_OPTIONS else "")
            message = f"{flag} is not used by {run}: it only applies to {needed_by}{cfg.where(name)}" + agent
            if RESUME_READS in cfg.sources.get(name, ""):
                # the resumed run was started with it, by a version that took it: its folder
                # must still finish (it has no flag to take the setting back)
                log.warning("%s; the run was started with it, and goes on", message)
                continue
            raise ConfigError(message)
