"""Getters that read state from the guest agent's routes (commands, accessibility tree) or
from the task itself (``rule``)."""

from __future__ import annotations

from typing import Any


def get_vm_command_line(env, config: dict) -> str:
    """POST /execute and its stdout."""
    return _check_command(env, config).get("output") or ""


def get_vm_command_error(env, config: dict) -> str:
    """POST /execute and its stderr."""
    return _check_command(env, config).get("error") or ""


def _check_command(env, config: dict) -> dict:
    """The getter's command run as a grading command, and never over a link the agent's code
    left into a process's folder of /proc (``refuse_proc_links``, as a shell task's check):
    what a check reads through one is its own, so ``grep -qx 4217 ~/count.txt`` read its
    own arguments and passed with ``~/count.txt`` a link to ``/proc/self/cmdline``. Refused,
    it gives no output and the guest's reason as its error (exit 126)."""
    command = config["command"]
    return env.vm.execute(command, shell=bool(config.get("shell", isinstance(command, str))),
                          timeout=float(config.get("timeout", 60)), isolated=True, refuse_proc_links=True)


def get_rule(env, config: dict) -> Any:
    """The config's ``rules``, as is."""
    return config["rules"]


def get_accessibility_tree(env, config: dict) -> str:
    """GET /accessibility: the XML."""
    return env.vm.accessibility_tree()


GETTERS = {"vm_command_line": get_vm_command_line, "vm_command_error": get_vm_command_error,
           "rule": get_rule, "accessibility_tree": get_accessibility_tree}
