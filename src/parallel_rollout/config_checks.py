"""The checks of a run's settings: values that make no sense, combinations that cannot work,
and the request fields ``--sampling`` may set. ``config.build_config`` runs ``validate_ranges``
on every RunConfig it makes; the RL scheduler checks its own sampling and token settings
with the same functions. Like the config, it imports nothing of the project but ``errors``,
``setting_names`` (how its errors say a setting) and ``vm_address`` (a RunConfig is read by its
fields, not imported).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import math
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError
from .setting_names import as_given, flag_name, setting_name, typed_text
from .vm_address import check_distinct, check_placeholders


#: request fields --sampling and extra_body may not set: the agent sends them itself
RESERVED_REQUEST_FIELDS = frozenset({"model", "messages", "stream", "n"})
#: fields of ROLL's generating_args (Hugging Face's) an OpenAI-compatible server ignores -> the one meant
IGNORED_REQUEST_FIELDS = {"max_new_tokens": "max_tokens"}
#: the request fields OpenAI's API, vLLM and SGLang read: a key a letter or two from one of
#: them is its misspelling, which a server ignores as it ignores any field it does not know
SERVER_REQUEST_FIELDS = frozenset({
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "min_tokens",
    "stop", "stop_token_ids", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "length_penalty", "logprobs", "top_logprobs", "prompt_logprobs", "logit_bias", "ignore_eos",
    "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens",
    "response_format", "chat_template_kwargs", "chat_template", "add_generation_prompt",
    "continue_final_message", "add_special_tokens", "return_token_ids", "return_tokens_as_token_ids",
    "echo", "best_of", "use_beam_search", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs", "truncate_prompt_tokens", "allowed_token_ids", "bad_words",
    "priority", "request_id", "user", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning_effort", "stream_options", "suffix", "regex", "json_schema", "ebnf", "no_stop_trim",
    "separate_reasoning", "lora_path", "rid", "return_hidden_states"})


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
                raise ConfigError(f"{said} {item!r} must be KEY=VALUE, e.g. top_p=0.9")
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
    for name in items:
        meant = misspelt_request_field(name)
        if meant:
            raise ConfigError(f"{said}: {name!r} is no request field a server reads (vLLM and SGLang ignore a "
                              f"field they do not know, so it would change nothing): did you mean {meant}? "
                              "(a field of your server's own that is none of these goes in extra_body)")
    return items


def misspelt_request_field(name: Any) -> str | None:
    """The request field ``name`` misspells (``temprature``, ``max_token``, ``top-p``), or None
    for a field a server reads and for one close to none of them (a server's own)."""
    if not isinstance(name, str) or name in SERVER_REQUEST_FIELDS:
        return None
    lowered = name.lower().replace("-", "_")
    if lowered in SERVER_REQUEST_FIELDS:
        return lowered
    close = difflib.get_close_matches(lowered, SERVER_REQUEST_FIELDS, n=1, cutoff=0.8)
    return close[0] if close else None


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


def _out_of_range(cfg: Any, name: str, rule: str) -> ConfigError:
    """The error of a number out of its range, said one way: the setting as the user named
    it, the range, and the value given (``--max_steps must be at least 1, got 0``)."""
    return ConfigError(f"{setting_name(cfg, name)} must be {rule}, got {getattr(cfg, name):g}")


def validate_ranges(cfg: Any) -> None:
    """Numbers that make no sense, and combinations that cannot work."""
    positive = ("num_rollouts", "num_vms", "max_turns", "envs_per_worker", "group_size",
                "screen_width", "screen_height")
    for name in positive:
        if getattr(cfg, name) < 1:
            raise _out_of_range(cfg, name, "at least 1")
    if cfg.max_retries < 0:
        raise _out_of_range(cfg, "max_retries", "0 or more")
    if cfg.resume and not cfg.run_id:
        raise ConfigError("--resume needs the --run-id of the run to continue (a new run's id is new)")
    for name in ("task_timeout", "boot_timeout_s", "lease_timeout_s", "ack_timeout_s", "start_timeout_s", "api_timeout_s"):
        # also rejects NaN, which would disable the timeout; 0 would fail every boot or lease
        value = getattr(cfg, name)
        if not value > 0:
            raise _out_of_range(cfg, name, "positive (seconds)")
    for name in ("shutdown_grace_s", "max_vm_replacements", "min_free_disk_mb", "spare_vms"):
        value = getattr(cfg, name)
        if value is not None and not value >= 0:
            raise _out_of_range(cfg, name, "0 or more")
    check_token_settings(cfg)
    for name in ("limit", "max_tokens", "vm_memory_mb", "vm_max_processes", "max_concurrent_rollouts"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise _out_of_range(cfg, name, "at least 1")
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
            raise _out_of_range(cfg, name, "0 or more (seconds)")
    servers = [cfg.base_url] if isinstance(cfg.base_url, str) else cfg.base_url or ()
    for url in servers:
        check_base_url(url, flag_name(cfg, "base_url"))
    check_distinct_servers(servers)
    check_abort_url(cfg, servers)
    if not cfg.session_header.strip() or any(c in cfg.session_header for c in ":\r\n "):
        raise ConfigError(f"{setting_name(cfg, 'session_header')} {cfg.session_header!r} must be an HTTP header name, e.g. X-Session-ID")
    if cfg.temperature is not None and not 0 <= cfg.temperature <= 2:
        raise _out_of_range(cfg, "temperature", "between 0 and 2")
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


