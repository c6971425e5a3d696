"""RunConfig: every tunable of a run in one dataclass, from defaults < TOML file < flags.

Tests shrink the timing fields (``lease_timeout_s``, ``shutdown_grace_s`` …) instead of
patching code. ``explicit`` remembers which fields the user set, so a flag that the chosen
mode, agent or provider cannot honour is rejected instead of silently ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_checks import parse_sampling, validate_ranges
from .errors import ConfigError
from .setting_names import (RESUME_READS, flag_name, set_off_the_command_line, set_where, setting_name, unknown_key,
                            written_in)
from .setting_types import PATH_SETTINGS, CheckedKeywords, checked_value, one_or_list, split_addresses

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class RunConfig(CheckedKeywords):
    """Every setting of a run; field names are the CLI flags with dashes as underscores."""

    mode: str = "shell"
    data: str | None = None
    num_rollouts: int = 5
    num_vms: int = 3
    use_vm_pool: bool = False
    output_dir: str = "results"
    max_turns: int = 100
    max_retries: int = 3
    provider_name: str = "process"
    snapshot_name: str | None = None
    path_to_vm: str | None = None
    #: remote provider: one guest address per VM (HOST[:PORT] or http://HOST:PORT); the
    #: flag repeats or takes a comma list
    vm_address: tuple[str, ...] = ()
    #: remote provider: the file holding the key the guest agents were started with
    #: (their --key-file); the key itself is never stored
    vm_key_file: str | None = None
    #: remote provider: shell command that resets the VM at {address}; "none": never reset
    reset_command: str | None = None
    headless: bool = False
    #: how each reset is checked before the VM is leased again: off, fast, full; None: the
    #: provider's default (fast where it is cheap: process, docker)
    verify_reset: str | None = None
    #: VMs booted ahead beyond the pool's size (a release hands one out at once); None:
    #: the provider's default
    spare_vms: int | None = None
    model: str = "gpt-4.1-2025-04-14"
    action_space: str = "pyautogui"
    screen_width: int = 1920
    screen_height: int = 1080
    client_password: str = "password"
    #: osworld: what observations hold (screenshot, a11y_tree, screenshot_a11y_tree)
    observation_type: str = "screenshot"
    #: osworld: seconds to wait after each executed action (and for WAIT)
    sleep_after_execution: float = 0.0
    #: osworld: the domain of an OSWorld folder given as --data ("all": every domain)
    domain: str = "all"
    #: osworld: the index file of an OSWorld folder (test_all.json, test_small.json …)
    osworld_index: str = "test_all.json"
    #: run the supported tasks of --data and give each unsupported one an 'unsupported'
    #: record, instead of refusing the whole set
    skip_unsupported: bool = False
    #: osworld: keep a recording.mp4 of each attempt
    record: bool = False
    #: rag: the reward, token F1 ("f1") or exact match ("em") of the answer
    rag_metric: str = "f1"
    agent: str = "oracle"
    agent_cmd: str | None = None
    #: --agent openai: one server, or several (a trajectory stays on one; agents/servers.py)
    base_url: str | list[str] | None = None
    #: --agent openai: the header carrying each attempt's session id in its model requests
    session_header: str = "X-Session-ID"
    #: --agent openai with several base URLs: seconds a failing server is left out
    server_cooldown: float = 30.0
    #: --agent openai: offer the mode's actions as OpenAI tools (agents/tools.py)
    tool_calls: bool = False
    temperature: float | None = None
    max_tokens: int | None = None
    #: --agent openai: generation parameters merged into each request body (top_p, seed,
    #: stop …); the flag --sampling KEY=VALUE repeats, run.toml has a [sampling] table
    sampling: dict[str, Any] = field(default_factory=dict)
    #: --agent openai: server-specific body fields (vLLM's chat_template_kwargs, top_k …);
    #: run.toml's [extra_body] table
    extra_body: dict[str, Any] = field(default_factory=dict)
    task_timeout: float = 600.0
    envs_per_worker: int = 1
    max_concurrent_rollouts: int | None = None
    group_size: int = 1
    run_id: str | None = None
    resume: bool = False
    limit: int | None = None
    vm_memory_mb: int | None = None
    vm_max_processes: int | None = None
    #: gates of a finished run (report.gate): exit 3 below this success rate (a fraction)
    fail_under: float | None = None
    #: exit 4 on a significant regression against this run id of the same output folder
    compare_to: str | None = None
    #: where to write the run's JUnit XML (one testcase per sample)
    junit_xml: str | None = None
    # Tunables below have no flag of their own; tests and TOML files set them.
    lease_timeout_s: float = 600.0
    #: seconds a worker may take to acknowledge an assignment before it counts as stuck
    ack_timeout_s: float = 120.0
    #: seconds the workers' server may take to import the run's plugin modules (start_timeout_s)
    start_timeout_s: float = 300.0
    boot_timeout_s: float = 60.0
    #: replacement VMs the pool may boot after deaths; None means 2 × the pool size
    max_vm_replacements: int | None = None
    shutdown_grace_s: float = 3.0
    progress: bool | None = None
    #: --dry-run: free MB the output folder's disk must have
    min_free_disk_mb: int = 512
    #: seconds one model request may take before it is retried
    api_timeout_s: float = 120.0
    #: RL schedulers: the unix socket of the policy gate model requests pass (policy_gate)
    policy_gate: str | None = None
    #: RL schedulers: the gate's secret (``PolicyGate.key``) every connection to it says first;
    #: never in config.json nor a repr
    policy_gate_key: str | None = field(default=None, repr=False)
    #: RL schedulers: a reply aborted by a weight update keeps its sampled tokens and goes
    #: on from them after resume (each token records its policy version), instead of being
    #: generated again from scratch (agents/streaming.py)
    partial_rollout: bool = False
    #: RL schedulers, for a model server that keeps decoding after its client hangs up: on an
    #: abort the agent also POSTs {"request_id": id, "rid": id} (the stream's id; SGLang's
    #: /abort_request reads "rid") to this URL; a path ("/abort_request") is on the server
    #: the request went to, so each of several servers is told of its own requests. A cancel
    #: without a scheduler's gate tells it too, of a request answered whole: the id it sent
    #: (stream_abort.named)
    abort_url: str | None = None
    #: the openai agent, token in / token out: a local Hugging Face tokenizer folder
    #: (tokenizer.json, tokenizer_config.json with the chat template); the agent keeps the
    #: token history and sends token ids to {base_url}/completions (agents/wire.py)
    tokenizer: str | None = None
    #: with a tokenizer: the model's context in tokens; an episode that reaches it ends as
    #: context_overflow (reward 0)
    max_model_len: int | None = None
    #: a reply cut at max_tokens (stop_reason "length"): "parse" it as an action, or "end"
    #: the episode (status truncated, reward 0)
    on_length: str = "parse"
    #: where workers and pools run: "local" (processes on this host) or "ray" (actors on
    #: every node of a Ray cluster; backends/ray_backend.py)
    backend: str = "local"
    #: --backend ray: "auto", HOST:PORT of a running cluster, or None (a local Ray instance
    #: started and stopped by the run)
    ray_address: str | None = None
    #: the fields the user set explicitly (flag or config file)
    explicit: frozenset[str] = field(default_factory=frozenset, compare=False)
    #: where each explicit setting given off the command line was set ("in run.toml", "from the environment
    #: variable …"), or how, in OSWorld's spelling (``TYPED``): what its errors say; not in config.json
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __new__(cls, *args: Any, **keywords: Any) -> RunConfig:
        # a misspelt field (num_vm=2) is named with the one meant, as run(num_vm=2) names it
        made = super().__new__(cls, *args, **keywords)
        # the fields a call named (a trainer's RunConfig(agent="oracle", …)), which a value equal
        # to its default does not tell from one left out; none known of a copy: dataclasses.replace
        # names every field, given or not, as a call may too, so the copy is told by its caller
        made.__dict__["_called_with"] = frozenset() if _copying(sys._getframe(1)) else frozenset(keywords)
        return made

    def __post_init__(self) -> None:
        # one tuple of addresses, however given: repeated flags, a comma list, a TOML list,
        # or the JSON list of a resumed run's config.json
        self.vm_address = split_addresses(self.vm_address)
        # KEY=VALUE strings from the flag, or the table of a TOML file / config.json; made in
        # Python (a trainer's RunConfig(sampling=…), not build_config's), said as its keyword
        self.sampling = parse_sampling(self.sampling, setting_name(self, "sampling")
                                       if "sampling" in self.explicit else "sampling")
        self.base_url = one_or_list(self.base_url)
        self.ray_address = self.ray_address or None  # --ray-address "": no cluster (a resume's cleared)
        if not isinstance(self.extra_body, dict):
            raise ConfigError(f"{setting_name(self, 'extra_body')} must be a table of request fields, "
                              f"got {self.extra_body!r}")
        if self.abort_url is not None and not str(self.abort_url).startswith(("http://", "https://", "/")):
            raise ConfigError(f"{setting_name(self, 'abort_url')} must be an http(s) URL, or a path on each model "
                              f"server such as '/abort_request', got {self.abort_url!r}")

    @property
    def pool_size(self) -> int:
        """VMs in the pool: M when shared, else one VM of its own per worker."""
        return self.num_vms if self.use_vm_pool else self.num_rollouts

    @property
    def concurrency(self) -> int:
        """Rollouts that may run at once across every loop of every worker."""
        loops = self.num_rollouts * self.envs_per_worker
        return min(loops, self.max_concurrent_rollouts or loops)

    def concurrency_note(self, limit: int) -> str:
        """What the concurrency line adds when ``limit`` (the backend's: every env loop, capped
        by --max-concurrent-rollouts) is below the --max-concurrent-rollouts asked for: it
        was cut to the loops there are, which the user must hear of, not guess."""
        asked = self.max_concurrent_rollouts
        if asked is None or asked <= limit:
            return ""
        return (f", not the {asked} asked for by --max-concurrent-rollouts{self.where('max_concurrent_rollouts')}: "
                f"the run has {limit} env loops ({flag_name(self, 'num_rollouts')} {self.num_rollouts} × --envs-per-worker "
                f"{self.envs_per_worker}{' per node' if self.backend == 'ray' else ''}); raise them for more")

    @property
    def replacement_budget(self) -> int:
        """How many replacement VMs the pool may boot."""
        if self.max_vm_replacements is not None:
            return self.max_vm_replacements
        return 2 * self.pool_size

    def to_json(self) -> dict[str, Any]:
        """The resolved config as written to config.json."""
        data = dataclasses.asdict(self)
        data["explicit"] = sorted(self.explicit)
        del data["sources"], data["policy_gate_key"]
        return data

    def said_where_set(self, error: ConfigError) -> ConfigError:
        """``error`` of these settings (a provider's refusal of them) followed by where the
        setting it names was set, when off the command line (``with_where_set``)."""
        said = with_where_set(str(error), self.sources, self)
        return error if said == str(error) else ConfigError(said)

    def where(self, name: str) -> str:
        """`` (num-vms = 0 in run.toml)`` for a setting set off the command line, else ""."""
        source = set_off_the_command_line(self.sources, name)
        return "" if source is None else " " + said_where(name, getattr(self, name), source)

    def identity(self) -> dict[str, Any]:
        """The fields that decide what a run computes; a resumed run must keep them."""
        return {name: getattr(self, name) for name in RESULT_FIELDS}

    def identity_hash(self) -> str:
        """A short hash of ``identity()``, stored in config.json."""
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


#: settings that change what a sample's result is: a resumed run must keep every one of them
#: (the content of the task file is checked too: provenance.py)
RESULT_FIELDS = (
    # what runs
    "mode", "data", "domain", "osworld_index", "group_size",
    # who acts, and how the model samples
    "agent", "agent_cmd", "model", "base_url", "temperature", "max_tokens", "sampling", "extra_body",
    "tool_calls", "tokenizer", "max_model_len", "on_length", "partial_rollout",
    # what the agent sees and may do
    "max_turns", "task_timeout", "action_space", "observation_type", "screen_width", "screen_height",
    "sleep_after_execution",
    # the machine it acts on, and how it is graded
    "snapshot_name", "path_to_vm", "vm_memory_mb", "vm_max_processes", "rag_metric",
)
#: settings a resume may change: how fast, where and how watched a run goes, which samples it
#: takes on (--limit, --skip-unsupported), how infrastructure failures are retried, and the
#: gates judged at its end, and which provider runs the VMs (a run stopped because its provider's
#: VMs never boot resumes on another that runs the same guest). None of them changes what a
#: sample's result is.
RUN_ONLY_FIELDS = (
    "provider_name",
    "num_rollouts", "num_vms", "use_vm_pool", "envs_per_worker", "max_concurrent_rollouts", "spare_vms",
    "output_dir", "run_id", "resume", "progress", "limit", "skip_unsupported", "record", "headless",
    "max_retries", "verify_reset", "vm_address", "vm_key_file", "reset_command", "client_password",
    "fail_under", "compare_to", "junit_xml",
    "lease_timeout_s", "ack_timeout_s", "start_timeout_s", "boot_timeout_s", "max_vm_replacements", "shutdown_grace_s",
    "api_timeout_s", "min_free_disk_mb", "policy_gate", "policy_gate_key", "backend", "ray_address",
    "session_header", "server_cooldown", "abort_url",
)
_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig) if f.name not in ("explicit", "sources")}
#: the code that makes a copy of a dataclass: replace(), and the __replace__ of copy.replace (3.13)
_COPIES = frozenset(getattr(getattr(dataclasses, name, None), "__code__", None) for name in ("replace", "_replace"))


def _copying(caller: Any) -> bool:
    """Whether the frame that called ``RunConfig(...)`` is ``dataclasses.replace``'s."""
    return caller is not None and caller.f_code in _COPIES


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file whose keys are the flag names (dashes or underscores)."""
    return settings(*_toml_table(path))


def _toml_table(path: str | Path) -> tuple[dict[str, Any], str]:
    """A TOML config file's run settings as it writes them, and the path its errors name."""
    path = Path(path).expanduser()
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    # task_sets: the RL schedulers' named task sets (rl.config.load_task_sets)
    return {k: v for k, v in raw.items() if k != "task_sets"}, str(path)


def settings(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Run settings keyed by flag names (dashes or underscores), checked against the fields'
    types; ConfigError naming ``where`` for an unknown key or a wrong type."""
    values = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise unknown_key(key, where, _FIELDS)
        if name in values:
            # num-vms and num_vms are one setting; silently keeping the last would hide a typo.
            raise ConfigError(f"{where}: {key!r} is given twice (as dashes and as underscores)")
        values[name] = checked_value(_FIELDS[name].type, name, value, where, key)
    return values


def build_config(flags: dict[str, Any], config_file: str | None = None,
                 flag_sources: dict[str, str] | None = None) -> RunConfig:
    """Defaults, then the TOML file, then explicit flags; checks ranges. A bad value's
    error says where it was set: the file, the run's config.json, or ``flag_sources``
    (the CLI's "from the environment variable …")."""
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}  # the file's keys, as it writes them: errors say shutdown_grace_s so
    if config_file:
        table, where = _toml_table(config_file)
        values.update(settings(table, where))
        keys = {key.replace("-", "_"): key for key in table}
    sources = {name: written_in(keys[name], f"in {config_file}") for name in values if name not in flags}
    sources.update(flag_sources or {})
    values.update(flags)
    for name in PATH_SETTINGS:
        # ~ as the shell expands it on the command line: a config file's or a variable's is not
        if isinstance(values.get(name), str):
            values[name] = os.path.expanduser(values[name])
    stored = _stored_settings(values)
    if values.get("backend", stored.get("backend")) != "ray":
        # a Ray run resumed on another backend (the backend changes no result): the stored
        # cluster address is no setting of this session
        stored.pop("ray_address", None)
    # the progress bar is the console's of this session: a run started at a terminal with
    # --progress, resumed by cron, drew its bar into the job's log (carriage returns)
    stored.pop("progress", None)
    if stored:
        # config.json writes its keys with underscores: an error names max_turns as written there
        where = f"in {_stored_path(values)}, {RESUME_READS}"
        sources.update({name: written_in(name, where) for name in stored if name not in values})
    values = {**stored, **values}
    if values.get("data") and values["data"].lower() not in NAMED_DATASETS:
        # Absolute, so a resume names the same file however the path is spelled (from a
        # cron job's folder, ./tasks.jsonl …) and config.json says which file it was.
        values["data"] = os.path.abspath(values["data"])
    if values.get("junit_xml") not in (None, "", "-"):  # '-' is refused by validate_ranges, which says where
        values["junit_xml"] = os.path.abspath(values["junit_xml"])
    if values.get("vm_key_file"):  # read by the provider wherever it runs (a Ray driver's folder)
        values["vm_key_file"] = os.path.abspath(values["vm_key_file"])
    index = values.get("osworld_index")
    if index and os.path.dirname(index) and not os.path.isabs(index) and os.path.isfile(index):
        # a path from here (evaluation_examples/test_small.json), as OSWorld's
        # --test_all_meta_path is; a bare name (test_small.json) stays the --data folder's
        values["osworld_index"] = os.path.abspath(index)
    try:
        cfg = RunConfig(**values, explicit=frozenset(values), sources=sources)
        validate_ranges(cfg)
    except ConfigError as exc:
        said = with_where_set(str(exc), sources, values)
        if said == str(exc):  # the command line's: the flag says it
            raise
        raise ConfigError(said) from None
    return cfg


def with_where_set(message: str, sources: dict[str, str], values: Any) -> str:
    """``message``, an error of a run's settings, followed by where the setting it names was
    set when not on the command line: "--num-vms must be at least 1 (num-vms = 0 in run.toml)",
    "min-free-disk-mb must …"; the setting it opens with, else the first flag it names that was
    (a setting with no flag may name one after it; "--verify-reset fast … and --reset-command
    none …" is said of the reset command a file gave). ``values``: a dict or a RunConfig."""
    opening = re.match(r"(?:--)?([a-z][a-z0-9_-]*)\b", message)
    named = ([opening.group(1)] if opening else []) + re.findall(r"--([a-z][a-z0-9-]*)", message)
    for name in (word.replace("-", "_") for word in named):
        source = set_off_the_command_line(sources, name) if name in _FIELDS else None
        if source is not None:
            value = values[name] if isinstance(values, dict) else getattr(values, name)
            return f"{message} {said_where(name, value, source)}"
    return message


def _stored_settings(values: dict[str, Any]) -> dict[str, Any]:
    """For ``--resume --run-id R``: the settings run R was started with (its config.json),
    so a resume needs no other flag; anything given again overrides them."""
    if not values.get("resume") or not values.get("run_id"):
        return {}
    path = _stored_path(values)
    try:
        stored = json.loads(path.read_text())["config"]
        names = set(stored["explicit"])
    except FileNotFoundError:
        if values.get("data") or not (path.parent / "results.jsonl").exists():
            return {}  # a new run, or every flag given again
        # a run's results without its config (a copy cut short, a file deleted): it said
        # "there is no run R", and --data is required
        raise ConfigError(f"{path}: not there, though {path.parent} holds a run's results; resume with every flag "
                          "the run was started with given again (--data, --mode, --agent …)") from None
    except (ValueError, KeyError, TypeError) as exc:
        if values.get("data"):  # every flag given: the runner checks the data against summary.json
            return {}
        raise ConfigError(f"{path}: unreadable run config ({exc}); resume with every flag the run was "
                          "started with given again (--data, --mode, --agent …)") from None
    return {name: stored[name] for name in names & set(_FIELDS) if name not in ("resume", "run_id")}


def said_where(name: str, value: Any, source: str) -> str:
    """Where a setting was set, as its source spells it: ``(num-vms = 0 in run.toml)``, or
    ``(num_vms=0 in run())`` for a Python call's keyword (``config_checks.set_where``)."""
    return f"({set_where(name, value, source)})"


def _stored_path(values: dict[str, Any]) -> Path:
    """The config.json of the run ``--resume --run-id`` names."""
    return Path(values.get("output_dir", RunConfig.output_dir)) / values["run_id"] / "config.json"


#: names --data accepts instead of a path: datasets that ship inside a Python package, and
#: where each one's file is found (``task_files.resolve_data`` imports it when used)
NAMED_DATASETS = {
    "humaneval": "parallel_rollout.envs.py:humaneval_path",
    "frozenlake": "parallel_rollout.envs.gym:frozenlake_path",
    "sokoban": "parallel_rollout.envs.sokoban:sokoban_path",
    "sokoban-endless": "parallel_rollout.envs.sokoban:sokoban_endless_path",
    "miniwob": "parallel_rollout.envs.web.catalog:miniwob_path",
    "rag": "parallel_rollout.envs.rag:rag_path",
}
#: every kind of --data, as its errors list them
DATA_KINDS = ("a task file (JSON list or JSONL, optionally .gz, or Parquet), an OSWorld folder, or a named dataset: "
              + ", ".join(NAMED_DATASETS))


def data_required(why: str = "") -> str:
    """The error of a run without ``--data``: every kind it takes (``why``: what else to say),
    and the OSWorld task set in the current folder, which OSWorld's run.py reads untold."""
    if Path("evaluation_examples", "examples").is_dir():
        why += "; OSWorld's run.py reads ./evaluation_examples when not told: here, --data evaluation_examples"
    return f"--data is required: {DATA_KINDS}{why}"


#: the mode of each named dataset's tasks: --data humaneval without --mode runs the py mode
NAMED_DATASET_MODES = {"humaneval": "py", "frozenlake": "gym", "sokoban": "gym", "sokoban-endless": "gym",
                       "miniwob": "web", "rag": "rag"}

#: the default run ids this process handed out: two runs of one second (threads, or one
#: after the other) must not share one, even before the first one's folder exists
_ISSUED_RUN_IDS: set[str] = set()
_ISSUED_LOCK = threading.Lock()


def default_run_id(mode: str, output_dir: str | Path | None = None) -> str:
    """A new run id: the mode, folder-safe (``myenv:DoubleEnv`` reads ``myenv-DoubleEnv``),
    the local time and the pid; ``-2``, ``-3`` … added when this process gave it already or
    ``output_dir`` holds a folder of that name, so a fresh id is never an existing run."""
    stem = f"{re.sub(r'[^A-Za-z0-9._-]+', '-', mode)}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid() % 10000:04d}"
    with _ISSUED_LOCK:
        run_id, count = stem, 1
        while run_id in _ISSUED_RUN_IDS or (output_dir is not None and os.path.lexists(Path(output_dir) / run_id)):
            count += 1
            run_id = f"{stem}-{count}"
        _ISSUED_RUN_IDS.add(run_id)
    return run_id
