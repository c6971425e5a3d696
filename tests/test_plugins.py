"""Plugins: a third-party package's mode, agent and provider, found through entry points.

The package (tests/data/plugin_pkg) is installed with pip into a folder of its own, which the
CLI's process gets on PYTHONPATH: its dist-info carries the entry points, exactly as an
installed distribution's would. The run goes through the CLI by the plugins' names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_exactly_once
from parallel_rollout.agents.base import Agent
from parallel_rollout.envs.base import Env
from parallel_rollout.errors import ConfigError
from parallel_rollout.plugins import Registry

PLUGIN_PKG = ROOT / "tests" / "data" / "plugin_pkg"
CLI = [sys.executable, str(ROOT / "run_parallel_rollout.py")]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The demo plugin package installed (by pip, offline) into a folder of its own."""
    target = tmp_path_factory.mktemp("plugin-site")
    build = tmp_path_factory.mktemp("plugin-build")
    shutil.copytree(PLUGIN_PKG, build / "pkg")  # the build writes egg-info next to the source
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-build-isolation", "--no-index", "--target", str(target), str(build / "pkg")],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(target.glob("pr_plugin_demo-*.dist-info/entry_points.txt"))
    return target


def run_cli(args: list[str], site: Path | None, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PR_PLUGIN_LOG=str(tmp_path / "provider.log"))
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=240, env=env)


def test_third_party_mode_agent_and_provider_run_by_name(plugin_site, tmp_path):
    data = tmp_path / "words.jsonl"
    words = {"w1": ("apple", False), "w2": ("pear", False), "w3": ("plum", True)}
    data.write_text("".join(json.dumps({"id": tid, "word": word, "wrong": wrong}) + "\n"
                            for tid, (word, wrong) in words.items()))
    proc = run_cli(["--mode", "echo-word", "--agent", "echo-agent", "--provider-name", "logged-process",
                    "--use-vm-pool", "--num-vms", "1", "--num-rollouts", "2", "--data", str(data),
                    "--output-dir", str(tmp_path / "out"), "--run-id", "plug", "--no-progress"],
                   plugin_site, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    finals = assert_exactly_once(tmp_path / "out" / "plug", {f"{tid}#0" for tid in words})
    # one task is answered wrong on purpose: a graded failure
    assert {k: r["reward"] for k, r in finals.items()} == {"w1#0": 1.0, "w2#0": 1.0, "w3#0": 0.0}
    # the plugin provider started the VM(s) the run used
    assert (tmp_path / "provider.log").read_text().split()


def test_plugin_names_are_listed_and_absent_without_the_package(plugin_site, tmp_path):
    args = ["--mode", "nosuch", "--data", str(tmp_path / "x.jsonl"), "--output-dir", str(tmp_path)]
    with_plugin = run_cli(args, plugin_site, tmp_path)
    assert with_plugin.returncode == 2
    assert "echo-word" in with_plugin.stderr, with_plugin.stderr
    without = run_cli(["--mode", "echo-word", "--agent", "echo-agent", "--data", str(tmp_path / "x.jsonl"),
                       "--output-dir", str(tmp_path)], None, tmp_path)
    assert without.returncode == 2
    assert "unknown mode 'echo-word'" in without.stderr, without.stderr


class _NotAnEnv:
    pass


def test_registry_resolves_paths_and_names_what_is_wrong():
    modes = Registry("mode", {"shell": "parallel_rollout.envs.shell:ShellEnv"}, Env)
    assert modes.load("shell").name == "shell"
    assert modes.load("parallel_rollout.envs.math:MathEnv").name == "math"
    assert "shell" in modes and "nosuch" not in modes and "a:B" in modes
    with pytest.raises(ConfigError, match=r"unknown mode 'nosuch'; known modes: .*shell"):
        modes.load("nosuch")
    with pytest.raises(ConfigError, match=r"mode 'no_such_mod_q:X': cannot import module 'no_such_mod_q'"):
        modes.load("no_such_mod_q:X")
    with pytest.raises(ConfigError, match=r"'_NotAnEnv' in test_plugins is not an Env subclass"):
        modes.load("test_plugins:_NotAnEnv")
    with pytest.raises(ConfigError, match=r"mode 'test_plugins:Nope': module test_plugins has no 'Nope'"):
        modes.load("test_plugins:Nope")
    agents = Registry("agent", {}, Agent)
    with pytest.raises(ConfigError, match="not an Agent subclass"):
        agents.load("parallel_rollout.envs.shell:ShellEnv")


def test_a_path_is_loaded_without_reading_the_entry_points(monkeypatch):
    """A ``module:Class`` path never reads the installed distributions' entry points: that
    scan (30-70 ms) used to land in every spawned worker's first attempt."""
    from parallel_rollout import plugins

    def no_scan(group):
        raise AssertionError(f"entry points of {group} read for a module:Class path")

    monkeypatch.setattr(plugins, "entry_point_targets", no_scan)
    modes = Registry("mode", {}, Env)
    assert modes.load("parallel_rollout.envs.math:MathEnv").name == "math"
    assert "a:B" in modes
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_mod_q'"):
        modes.load("no_such_mod_q:X")
