"""Getters that read state from the guest agent's routes (commands, accessibility tree) or
from the task itself (``rule``)."""

from __future__ import annotations

from typing import Any


def get_vm_command_line(env, config: dict) -> str:
    """POST /execute and its stdout."""
    command = config["command"]
    result = env.vm.execute(command, shell=bool(config.get("shell", isinstance(command, str))),
                            timeout=float(config.get("timeout", 60)), isolated=True)
    return result.get("output") or ""


def get_vm_command_error(env, config: dict) -> str:
    """POST /execute and its stderr."""
    command = config["command"]
    result = env.vm.execute(command, shell=bool(config.get("shell", isinstance(command, str))),
                            timeout=float(config.get("timeout", 60)), isolated=True)
    return result.get("error") or ""


def get_rule(env, config: dict) -> Any:
    """The config's ``rules``, as is."""
    return config["rules"]


def get_accessibility_tree(env, config: dict) -> str:
    """GET /accessibility: the XML."""
    return env.vm.accessibility_tree()


GETTERS = {"vm_command_line": get_vm_command_line, "vm_command_error": get_vm_command_error,
           "rule": get_rule, "accessibility_tree": get_accessibility_tree}
