"""The checks of a run's settings: values that make no sense, combinations that cannot work,
and the request fields ``--sampling`` may set. ``config.build_config`` runs ``validate_ranges``
on every RunConfig it makes; the RL scheduler checks its own sampling and token settings
with the same functions. Like the config, it imports nothing of the project but ``errors``
(a RunConfig is read by its fields, not imported).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
import os
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError
from .vm_address import check_distinct, check_placeholders


#: how a setting read from an environment variable is said to come from (``RunConfig.sources``)
FROM_VARIABLE = "from the environment variable "
#: a setting's source (``RunConfig.sources``) when the command line gave it in another
#: spelling, OSWorld's (cli_aliases): "typed --observation_type", what its errors name
TYPED = "typed "


#: a config file's source (``RunConfig.sources``) when it wrote the key with underscores, not
#: as the flag is spelt: "written shutdown_grace_s in run.toml", the key its errors say
WRITTEN = "written "


def written_in(key: str, source: str) -> str:
    """The source of a setting that ``source`` (``in run.toml``) gives as ``key``: a ``WRITTEN``
    one when the key is not the flag's spelling (``shutdown_grace_s``), else ``source``."""
    return f"{WRITTEN}{key} {source}" if "_" in key else source


def key_and_where(name: str, source: str) -> tuple[str, str]:
    """Setting ``name``, set off the command line, as its ``source`` writes it, and where:
    (``num-vms``, ``in run.toml``); a key written with underscores (a ``WRITTEN`` source) as
    written, (``shutdown_grace_s``, ``in run.toml``); a Python call's keyword, (``num_vms``, ``in run()``)."""
    if source.startswith(WRITTEN):
        key, _, where = source[len(WRITTEN):].partition(" ")
        return key, where
    return (name if source.endswith("()") else name.replace("_", "-")), source


def set_off_the_command_line(sources: dict[str, str], name: str) -> str | None:
    """Where setting ``name`` was set when not on the command line (``RunConfig.sources``: "in
    run.toml", "from the environment variable …", "in run()"), else None: given as a flag (in
    either spelling, a ``TYPED`` source) or not at all."""
    source = sources.get(name)
    return None if source is None or source.startswith(TYPED) else source


def flag_name(cfg: Any, name: str) -> str:
    """The flag of setting ``name`` as the user typed it: ``--observation_type`` where the
    command line spelled it so (a ``TYPED`` source), else ``--observation-type``."""
    source = getattr(cfg, "sources", {}).get(name, "")
    return source[len(TYPED):] if source.startswith(TYPED) else "--" + name.replace("_", "-")


#: the settings with no flag of their own (config.py's tunables, the RL schedulers' and the
#: model client's): a config file's keys, run()'s keywords, a RunConfig's fields
FLAGLESS = frozenset({"lease_timeout_s", "ack_timeout_s", "start_timeout_s", "shutdown_grace_s", "api_timeout_s",
                      "max_vm_replacements", "min_free_disk_mb", "policy_gate", "policy_gate_key",
                      "partial_rollout", "abort_url", "tokenizer", "max_model_len", "on_length", "extra_body"})


def setting_name(cfg: Any, name: str) -> str:
    """Setting ``name`` as an error of its value says it: its flag (``flag_name``; a Python
    call's errors are said again as its keywords, ``call_spelling.as_called``); one with no
    flag (``FLAGLESS``) as the key its source spells: ``min-free-disk-mb`` set in a config
    file (or a resumed run's config.json), ``min_free_disk_mb`` in Python (run()'s keyword, a
    trainer's RunConfig field)."""
    if name not in FLAGLESS:
        return flag_name(cfg, name)
    source = set_off_the_command_line(getattr(cfg, "sources", {}), name)
    return name if source is None else key_and_where(name, source)[0]


#: the source of the settings a Python call gave (``api.run``): they are said as Python spells them
PYTHON_CALL = "in run()"


def as_given(cfg: Any, name: str, with_value: bool = False) -> str:
    """A setting as the user gave it: ``--task-timeout`` (the command line, as typed:
    ``--num-workers``, ``--observation_type``; or not given; or a resume's, read from its
    config.json, which that flag changes), ``task-timeout in run.toml``, ``the environment
    variable PARALLEL_ROLLOUT_TASK_TIMEOUT``, ``task_timeout in run()`` (a Python call's
    keyword; one it left out, ``task_timeout``). ``with_value``: with the value it has, as its
    source spells it: ``--num-workers 5``, ``num-rollouts = 5 in run.toml`` (``set_where``)."""
    sources = getattr(cfg, "sources", {})
    source, value = set_off_the_command_line(sources, name), getattr(cfg, name)
    if source is not None and not source.endswith(RESUME_READS):
        if with_value:
            return set_where(name, value, source)
        if source.startswith("from "):  # from the environment variable …
            return source[len("from "):]
        return " ".join(key_and_where(name, source))
    if source is None and PYTHON_CALL in sources.values():
        return f"{name}={typed_text(value, python=True)}" if with_value else name
    flag = flag_name(cfg, name)
    return f"{flag} {value}" if with_value else flag


def key_as_given(cfg: Any, name: str) -> str:
    """``as_given`` of a setting with no flag (``min_free_disk_mb``); one no one set, as a Python
    call's keyword, or on the command line as the key that sets it: ``min-free-disk-mb in a config file``."""
    said = as_given(cfg, name)
    if said.startswith("--"):  # a flag there is not
        python = any(source.endswith("()") for source in getattr(cfg, "sources", {}).values())
        return name if python else f"{name.replace('_', '-')} in a config file"
    return said


def said_if_given(cfg: Any, name: str) -> str | None:
    """``as_given`` of a setting the run was given (a flag, a config file, a variable, a
    call's keyword, a resume's config.json); None for a default, which no one typed."""
    return as_given(cfg, name) if name in getattr(cfg, "explicit", ()) else None


def set_where(name: str, value: Any, source: str) -> str:
    """A setting set off the command line, as its source spells it: ``num-vms = 0 in run.toml``,
    or ``num_vms=0 in run()`` for a Python call's keyword (``in preflight()`` too); its value as typed."""
    key, source = key_and_where(name, source)
    if source.endswith("()"):
        return f"{key}={typed_text(value, python=True)} {source}"
    if source.startswith(FROM_VARIABLE) and isinstance(value, (list, tuple)):
        # a list read from a variable is its text split (at spaces by click, at commas by
        # --vm-address): the text typed, not a list no one wrote
        value = os.environ.get(source[len(FROM_VARIABLE):], value)
    return f"{key} = {typed_text(value)} {source}"


#: request fields --sampling and extra_body may not set: the agent sends them itself
RESERVED_REQUEST_FIELDS = frozenset({"model", "messages", "stream", "n"})
#: fields of ROLL's generating_args (Hugging Face's) an OpenAI-compatible server ignores -> the one meant
IGNORED_REQUEST_FIELDS = {"max_new_tokens": "max_tokens"}


def parse_sampling(value: Any, said: str = "--sampling") -> dict[str, Any]:
    """``--sampling`` as a dict: KEY=VALUE strings (VALUE parsed as JSON when it parses,
    else kept as a string), or a mapping as it is; ConfigError naming a bad item, and the
    setting as ``said`` (a scheduler's ``sampling`` keyword is no flag)."""
    if isinstance(value, dict):
        items = dict(value)
    else:
        items = {}
        for item in [value] if isinstance(value, str) else list(value or ()):
            key, sep, raw = str(item).partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--sampling {item!r} must be KEY=VALUE, e.g. top_p=0.9")
            try:
                items[key.strip()] = json.loads(raw)
            except ValueError:
                items[key.strip()] = raw
    reserved = sorted(RESERVED_REQUEST_FIELDS & set(items))
    if reserved:
        raise ConfigError(f"{said} cannot set {', '.join(reserved)}: the agent sends it itself")
    for name in IGNORED_REQUEST_FIELDS.keys() & items.keys():
        raise ConfigError(f"{said}: {name} is not read by an OpenAI-compatible server (vLLM and SGLang ignore "
                          f"it, and the reply runs to their own limit): give {IGNORED_REQUEST_FIELDS[name]}")
    return items


def check_sampling(value: Any, where: str = "sampling") -> dict[str, Any]:
    """A scheduler's (or an attempt's) sampling overrides as a dict: request fields such as
    temperature, top_p, max_tokens, seed; ConfigError naming ``where`` and the bad field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a dict of request fields, e.g. {{'temperature': 0}}, got {value!r}")
    items = parse_sampling(value, where)
    temperature = items.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        raise ConfigError(f"{where}: temperature must be a number between 0 and 2, got {temperature!r}")
    for name in ("max_tokens", "max_completion_tokens"):
        limit = items.get(name)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"{where}: {name} must be an integer of at least 1, got {limit!r}")
    return items


def check_vm_sharing(envs_per_worker: int, use_vm_pool: bool, needs_vm: bool,
                     said: str = "--envs-per-worker") -> None:
    """ConfigError when a worker's env loops would share its one VM: ``envs_per_worker`` > 1
    (``said`` so) in a mode that runs in a VM, without the shared pool. Each worker owns
    exactly one VM then, which its other loops wait on (an RL scheduler's first get_batch
    timed out with no group ready)."""
    if needs_vm and not use_vm_pool and envs_per_worker > 1:
        raise ConfigError(f"{said} > 1 runs several env loops per worker that share VMs; "
                          "add --use-vm-pool (without it each worker owns exactly one VM of its own)")


def check_distinct_servers(urls: Any) -> None:
    """ConfigError for a server listed twice in a fleet (``--base-url`` repeated, a TOML list):
    it is one server all the same, so the fleet had one server fewer than it lists, with no
    word of it (a port mistyped as another's left the server meant out)."""
    seen: set[str] = set()
    for url in urls:
        if url.rstrip("/") in seen:
            raise ConfigError(f"--base-url {url!r} is listed twice: list each server of the fleet once "
                              f"(the same server twice is one server; was another meant?)")
        seen.add(url.rstrip("/"))


def check_abort_url(cfg: Any, urls: Any) -> None:
    """ConfigError for an ``abort_url`` on one server of several: every abort, of requests at
    the other servers too, was POSTed there, and those servers decoded the aborted requests on
    (a path is told to each request's own server; another host, a router, may fan out)."""
    abort_url = cfg.abort_url
    if not abort_url or abort_url.startswith("/") or len(urls) < 2:
        return
    where = urlsplit(abort_url)
    if any(urlsplit(url).netloc == where.netloc for url in urls):
        raise ConfigError(f"{setting_name(cfg, 'abort_url')} {abort_url!r} is on one server of the fleet "
                          f"({where.netloc}): the aborts of requests at the others would be told there; give its "
                          f"path, {where.path or '/'!r}, to tell each server of the fleet "
                          f"({as_given(cfg, 'base_url')}) its own")


def check_base_url(url: str, where: str = "--base-url") -> None:
    """ConfigError unless ``url`` is one http(s) URL with a host (or a unix socket's): without
    a scheme every model request fails, and a run's endpoint cannot change on resume. A comma
    or a space in it is several URLs in one (each request would go to their joined text)."""
    if any(c == "," or c.isspace() for c in url):
        repeated = " ".join(f"--base-url {part}" for part in url.replace(",", " ").split()[:3])
        raise ConfigError(f"{where} {url!r} holds {'a comma' if ',' in url else 'a space'}: it takes one URL; "
                          f"for several servers repeat --base-url ({repeated}) or give a list (base_url = [...])")
    parts = urlsplit(url)
    if ("unix" in parts.scheme or parts.scheme in ("http", "https")) and (parts.netloc or "unix" in parts.scheme):
        return
    hint = f"http://{url}" if parts.scheme not in ("http", "https") and "//" not in url else "http://localhost:8000/v1"
    raise ConfigError(f"{where} {url!r} is not an http(s) URL of a model endpoint: give its scheme and host, "
                      f"e.g. {hint}")


def check_not_stdout(option: str, path: str | None) -> None:
    """ConfigError for ``-`` as the path of a file a command writes (--junit-xml, a report's
    page): none of them goes to stdout, which carries the command's own lines, and a file
    named '-' is never what was meant."""
    if path == "-":
        raise ConfigError(f"{option} -: writing it to stdout is not supported; give a file path")


#: what a user without Ray is told
RAY_INSTALL_HINT = "--backend ray needs Ray: pip install 'parallel-rollout[ray]'"


def check_ray() -> None:
    """ConfigError (with how to install it) when Ray is not importable: the ``backend``
    field's value ``ray`` is only valid where it is."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_INSTALL_HINT)


#: the values of the settings that take one of a few words (the CLI's choices); what else
#: names one: the registries of agents, modes and providers, the named datasets, GATE_OFF
CHOICES = {"observation_type": ("screenshot", "a11y_tree", "screenshot_a11y_tree"),
           "action_space": ("computer_13", "pyautogui"), "backend": ("local", "ray"),
           "verify_reset": ("off", "fast", "full"), "rag_metric": ("f1", "em"), "reset_command": ("none",)}


def validate_ranges(cfg: Any) -> None:
    """Numbers that make no sense, and combinations that cannot work."""
    positive = ("num_rollouts", "num_vms", "max_turns", "envs_per_worker", "group_size",
                "screen_width", "screen_height")
    for name in positive:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{setting_name(cfg, name)} must be at least 1")
    if cfg.max_retries < 0:
        raise ConfigError(f"{setting_name(cfg, 'max_retries')} must be 0 or more")
    if cfg.resume and not cfg.run_id:
        raise ConfigError("--resume needs the --run-id of the run to continue (a new run's id is new)")
    for name in ("task_timeout", "boot_timeout_s", "lease_timeout_s", "ack_timeout_s", "start_timeout_s", "api_timeout_s"):
        # also rejects NaN, which would disable the timeout; 0 would fail every boot or lease
        value = getattr(cfg, name)
        if not value > 0:
            raise ConfigError(f"{setting_name(cfg, name)} must be positive (seconds), got {value:g}")
    for name in ("shutdown_grace_s", "max_vm_replacements", "min_free_disk_mb", "spare_vms"):
        value = getattr(cfg, name)
        if value is not None and not value >= 0:
            raise ConfigError(f"{setting_name(cfg, name)} must be 0 or more, got {value:g}")
    check_token_settings(cfg)
    for name in ("limit", "max_tokens", "vm_memory_mb", "vm_max_processes", "max_concurrent_rollouts"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ConfigError(f"{setting_name(cfg, name)} must be at least 1")
    if cfg.observation_type not in CHOICES["observation_type"]:
        raise ConfigError(f"{flag_name(cfg, 'observation_type')} must be screenshot, a11y_tree or screenshot_a11y_tree")
    if cfg.action_space not in CHOICES["action_space"]:  # envs/osworld/actions.ACTION_SPACES
        raise ConfigError(f"{flag_name(cfg, 'action_space')} must be computer_13 or pyautogui, got {cfg.action_space!r}")
    if cfg.backend not in CHOICES["backend"]:
        raise ConfigError(f"{setting_name(cfg, 'backend')} must be local or ray")
    if cfg.ray_address is not None and cfg.backend != "ray":
        raise ConfigError("--ray-address needs --backend ray")
    if cfg.backend == "ray":
        check_ray()
    if cfg.verify_reset not in (None, *CHOICES["verify_reset"]):
        raise ConfigError(f"{setting_name(cfg, 'verify_reset')} must be off, fast or full, got {cfg.verify_reset!r}")
    if cfg.rag_metric not in CHOICES["rag_metric"]:
        raise ConfigError(f"{setting_name(cfg, 'rag_metric')} must be f1 or em")
    for name in ("sleep_after_execution", "server_cooldown"):
        if not getattr(cfg, name) >= 0:
            raise ConfigError(f"{setting_name(cfg, name)} must be 0 or more (seconds)")
    servers = [cfg.base_url] if isinstance(cfg.base_url, str) else cfg.base_url or ()
    for url in servers:
        check_base_url(url, flag_name(cfg, "base_url"))
    check_distinct_servers(servers)
    check_abort_url(cfg, servers)
    if not cfg.session_header.strip() or any(c in cfg.session_header for c in ":\r\n "):
        raise ConfigError(f"{setting_name(cfg, 'session_header')} {cfg.session_header!r} must be an HTTP header name, e.g. X-Session-ID")
    if cfg.temperature is not None and not 0 <= cfg.temperature <= 2:
        raise ConfigError(f"{setting_name(cfg, 'temperature')} must be between 0 and 2")
    extras = {**cfg.sampling, **cfg.extra_body}
    reserved = sorted(RESERVED_REQUEST_FIELDS & set(cfg.extra_body))
    if reserved:
        raise ConfigError(f"{setting_name(cfg, 'extra_body')} cannot set {', '.join(reserved)}: the agent sends it itself")
    for name in ("temperature", "max_tokens", "max_completion_tokens"):
        flag = "max_tokens" if name == "max_completion_tokens" else name
        if name in extras and getattr(cfg, flag) is not None:
            raise ConfigError(f"{setting_name(cfg, flag)} and {setting_name(cfg, 'sampling')}/"
                              f"{setting_name(cfg, 'extra_body')} {name} both set "
                              "the same thing; give one")
    if not cfg.use_vm_pool and "num_vms" in cfg.explicit:
        raise ConfigError("--num-vms sizes the shared pool and needs --use-vm-pool; without it each "
                          f"worker owns one VM of its own ({flag_name(cfg, 'num_rollouts')} VMs)")
    # one machine per VM: the pool's other VMs would wait for one, fail to boot and spend its budget
    wanted = cfg.pool_size + (cfg.spare_vms or 0)
    vm_files = [p for p in (cfg.path_to_vm or "").split(",") if p.strip()]
    one_each = {"remote": ("address", "address(es)", "--vm-address", cfg.vm_address),
                "vmware": ("file", "file(s)", "--path-to-vm", vm_files),
                "virtualbox": ("file", "file(s)", "--path-to-vm", vm_files)}
    one, some, flag, given = one_each.get(cfg.provider_name, ("", "", "", []))
    if given and wanted > len(given):
        raise ConfigError(
            f"the {cfg.provider_name} provider has {len(given)} VM {some} ({flag}) but the pool needs "
            f"{wanted} VMs (--num-vms with --use-vm-pool, else {flag_name(cfg, 'num_rollouts')}, plus --spare-vms): "
            f"give one {one} per VM, or fewer VMs")
    if cfg.fail_under is not None and not 0.0 <= cfg.fail_under <= 1.0:
        typed = typed_text(cfg.fail_under)  # '{:g}' said 80.00001 as 80
        percent = f": {typed_text(cfg.fail_under / 100)} or {typed}% for {typed}%" \
            if 1 < cfg.fail_under <= 100 else " (0.8 or 80% means 80%)"
        raise ConfigError(f"--fail-under {typed} must be a fraction between 0 and 1{percent}")
    if cfg.compare_to is not None:
        if not cfg.compare_to or "/" in cfg.compare_to or cfg.compare_to in (".", ".."):
            raise ConfigError(f"--compare-to {cfg.compare_to!r} must be a run id (a folder of --output-dir)")
        if cfg.run_id is not None and cfg.compare_to == cfg.run_id:
            raise ConfigError("--compare-to names this run itself; give the baseline run's id")
    check_not_stdout("--junit-xml", cfg.junit_xml)
    if cfg.run_id is not None:
        if not cfg.run_id or "/" in cfg.run_id or cfg.run_id in (".", ".."):
            raise ConfigError(f"--run-id {cfg.run_id!r} must be a plain folder name")
    if cfg.provider_name == "remote":  # checked here, its errors say where a config file gave them
        check_distinct(cfg.vm_address)
        check_placeholders(cfg.reset_command or "")
    check_finite(cfg)


def check_finite(cfg: Any) -> None:
    """ConfigError for a float setting that is inf or nan, from a flag, a config file or a
    variable alike. The range checks above say more where they catch one (nan is no positive
    timeout); this catches the rest: an infinite timeout passes ``> 0``, and config.json, where
    the run keeps its settings, would hold ``Infinity``, which is not JSON."""
    for item in dataclasses.fields(cfg):
        value = getattr(cfg, item.name)
        if "float" in str(item.type) and isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{setting_name(cfg, item.name)} must be a finite number, got {value:g}")
    for name, table in ((setting_name(cfg, "sampling"), cfg.sampling), (setting_name(cfg, "extra_body"), cfg.extra_body)):
        for key, value in table.items():  # a request body with NaN is no JSON either
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{name} {key} must be a finite number, got {value:g}")
            try:  # it goes into each request's body, and into config.json
                json.dumps(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{name} {key} must be a JSON value (a number, a string, a list or a table of "
                                  f"them), got {type(value).__name__} {value!r}") from None


def check_token_settings(cfg: Any) -> None:
    """on_length and max_model_len (the RL scheduler checks them too: it makes no batch run)."""
    if cfg.on_length not in ("parse", "end"):
        raise ConfigError(f"{setting_name(cfg, 'on_length')} must be 'parse' or 'end', got {cfg.on_length!r}")
    if cfg.max_model_len is not None and (isinstance(cfg.max_model_len, bool) or cfg.max_model_len < 1):
        raise ConfigError(f"{setting_name(cfg, 'max_model_len')} must be at least 1 (tokens), got {cfg.max_model_len}")
    if cfg.max_model_len is not None and cfg.agent == "openai" and not cfg.tokenizer:
        # it would be ignored: the openai agent sends token ids (what it bounds) only with a tokenizer
        bound, tokenizer = setting_name(cfg, "max_model_len"), setting_name(cfg, "tokenizer")
        raise ConfigError(f"{bound} bounds token-id prompts (to {cfg.max_model_len}), which the openai agent "
                          f"sends with a {tokenizer} only; without one the server renders the chat and its own "
                          "context limit applies (its 'too long' error ends the episode as context_overflow): "
                          f"set {tokenizer} or leave {bound} out")


#: what other eval harnesses and CI tools call the gates -> the setting it is here: the nearest
#: spelling was another setting's ("--min-pass-rate": did you mean --client-password?), and the
#: variable of that name a systemd unit set was ignored, its gate never applied
GATE_SYNONYMS = {
    **dict.fromkeys(("min_pass_rate", "min_success_rate", "pass_rate", "success_rate", "threshold",
                     "pass_threshold", "success_threshold", "min_score", "fail_below"), "fail_under"),
    **dict.fromkeys(("baseline", "baseline_run", "compare", "compare_with"), "compare_to"),
}

#: a run flag's other names and OSWorld's run.py spellings that name a setting otherwise, as a
#: config file's keys (underscored): the command line takes them, a file's key is the setting's
#: (tests/test_config.py holds this equal to cli.py's flags and cli_aliases.OSWORLD_ALIASES)
KEY_SYNONYMS = {
    "num_workers": "num_rollouts", "provider": "provider_name", "max_steps": "max_turns",
    "test_config_base_dir": "data", "test_all_meta_path": "osworld_index", "result_dir": "output_dir",
    "num_envs": "num_rollouts",
}


#: how a setting a resume took from the run's config.json is said to come from (``RunConfig.sources``)
RESUME_READS = "which --resume reads"
#: the words that turn a gate off (``--fail-under none``, ``--compare-to none``, or empty): a
#: resume inherits the gates its run was started with from config.json, and a night whose
#: baseline was deleted, or a resume meant only to finish the run, had no other way out
GATE_OFF = ("none", "")


def gate_setting(name: str, value: Any, said: str = "--fail-under ") -> Any:
    """``value`` of setting ``name``, None for a gate given as ``GATE_OFF``; ``fail_under`` as a
    percentage (``80%``, the way coverage tools write it) is its fraction, 0.8 (an error says
    the setting as ``said``: the flag, a config file's key, or nothing where click names it)."""
    if name in ("fail_under", "compare_to") and isinstance(value, str) and value.strip().lower() in GATE_OFF:
        return None
    if name == "fail_under" and isinstance(value, str) and value.strip().endswith("%"):
        try:
            percent = float(value.strip()[:-1])
        except ValueError:
            raise ConfigError(f"{said}{value!r} is no percentage: give a fraction (0.8) "
                              "or a percentage (80%)") from None
        if not 0 <= percent <= 100:
            raise ConfigError(f"{said}{value!r} must be a percentage between 0% and 100%")
        return percent / 100
    if name == "fail_under" and isinstance(value, str):  # a variable's, or a config file's "0.8"
        try:
            return float(value)
        except ValueError:  # click said "'off' is not a valid float.", a config file "must be a number"
            raise ConfigError(f"{said}{value!r} is no number: give a fraction (0.8), a percentage (80%) "
                              "or none (no gate)") from None
    return value


def typed_text(value: Any, python: bool = False) -> str:
    """``value`` as an error quotes it, the way a config file, a variable or a call wrote it:
    a float setting's whole number as the ``80`` typed (its check made it ``80.0``), ``nan``
    and ``inf`` as such (JSON says ``NaN``); else as JSON, or as Python (``python``) writes it."""
    if isinstance(value, float) and (value.is_integer() or not math.isfinite(value)):
        return str(int(value)) if value.is_integer() else str(value)
    return repr(value) if python else json.dumps(value, default=str)


def closest_setting(name: str, names: Any) -> str | None:
    """The setting (of ``names``, underscored) that ``name`` (underscored) misspells or that
    another tool or name calls so (``GATE_SYNONYMS``, ``KEY_SYNONYMS``) or the one setting
    that holds each of its words (``async_ratio``: async_generation_ratio), None when none is close."""
    if name in GATE_SYNONYMS:
        return GATE_SYNONYMS[name]
    names, words = list(names), set(name.split("_"))
    if KEY_SYNONYMS.get(name) in names:  # num_workers, max_steps: the command line's other names
        return KEY_SYNONYMS[name]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    holding = [each for each in names if len(words) > 1 and words <= set(each.split("_"))]
    return close[0] if close else holding[0] if len(holding) == 1 else None


def check_no_stray_fields(cfg: Any, where: str) -> None:
    """ConfigError for an attribute set on the dataclass ``cfg`` that is none of its fields
    (``cfg.max_retry = 0``, a misspelt ``max_retries``): nothing reads it, so the setting the
    trainer meant was silently left at its default."""
    names = [item.name for item in dataclasses.fields(cfg)]
    stray = sorted(name for name in set(vars(cfg)) - set(names) if not name.startswith("_"))  # its own: _called_with
    if stray:
        close = closest_setting(stray[0], names)
        raise ConfigError(f"{where}: {stray[0]!r} is no field of {type(cfg).__name__}"
                          + (f" (did you mean {close}?)" if close else "")
                          + "; set as an attribute, nothing reads it")


#: the CLI's flags of how ``run`` runs, no RunConfig field: what a Python call does instead
_COMMAND_LINE_ONLY = {
    "dry_run": "from Python the dry run is preflight(...) of parallel_rollout.api, with the same settings",
    "check_endpoint": "from Python it is preflight(..., check_endpoint=True) of parallel_rollout.api",
    "print_config": "from Python, parallel_rollout.config.build_config(...).to_json() shows the settings",
    "verbose": "from Python, set the level of the 'parallel_rollout' logger",
    "quiet": "from Python, set the level of the 'parallel_rollout' logger",
}


def unknown_key(key: str, where: str, fields: Any) -> ConfigError:
    """The error for ``key``, no setting of ``fields``, given ``where`` (a file, a Python call:
    ``where`` ends in ``()``): the setting it misspells; for one of the CLI's flags of how it
    runs (``dry_run``: it was an unknown key whose hint, 'keys are the flag names', it is),
    what does it in a call, or that it goes on the command line."""
    name, call = key.replace("-", "_"), where.endswith("()")
    if name in _COMMAND_LINE_ONLY:
        return ConfigError(f"{where}: {key!r} is no setting of a run but how the command runs: "
                           + (_COMMAND_LINE_ONLY[name] if call else "give it on the command line"))
    example = "num_vms" if call else "num-vms"
    close = closest_setting(name, fields)  # as the CLI's flags
    hint = f"did you mean {close if call else close.replace('_', '-')}?" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}; {hint or f'keys are the flag names, e.g. {example}'}")
