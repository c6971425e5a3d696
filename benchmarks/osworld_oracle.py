"""Real OSWorld tasks with the oracle agent, through a pool of desktop VMs.

::

    python benchmarks/osworld_oracle.py [--data ../shared/osworld/evaluation_examples]
        [--provider process] [--num-rollouts 3] [--num-vms 2] [--domain D] [--only ID,..]
        [--out results]

Runs every task that has a project-written reference (``envs/data/osworld_references.jsonl``)
from OSWorld's own task files, with ``--agent oracle --action-space pyautogui`` at OSWorld's
1920x1080. The tasks' input files come from a local download cache: an http(s) URL already
in the user's cache is used, any other gets an equivalent file made here by its type (an
image, a document, a workbook, an archive …), since these machines cannot reach the URLs.
Prints per domain the feasible and the infeasible tasks passed (counted apart: an infeasible
task passes by saying FAIL) and the run folder; exit 0 when every task passed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from parallel_rollout.config import build_config
from parallel_rollout.envs.osworld import browser_steps, downloads
from parallel_rollout.envs.osworld.references import reference_index
from parallel_rollout.runner import Runner
from parallel_rollout.tasks_osworld import osworld_folder

DEFAULT_DATA = Path("../shared/osworld/evaluation_examples")  # from the checkout, as the README says


def equivalent_file(name: str) -> bytes:
    """A small valid file of the type ``name`` says (what the task would download)."""
    suffix = name.lower().rsplit(".", 1)[-1] if "." in name else ""
    if suffix in ("png", "jpg", "jpeg", "webp", "gif", "bmp", "pdf"):
        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (320, 240), (200, 120, 40)).save(
            out, format={"jpg": "JPEG", "jpeg": "JPEG"}.get(suffix, suffix.upper()))
        return out.getvalue()
    if suffix == "docx":
        import docx

        document, out = docx.Document(), io.BytesIO()
        document.add_paragraph("An equivalent document made for a local run.")
        document.save(out)
        return out.getvalue()
    if suffix == "xlsx":
        import openpyxl

        book, out = openpyxl.Workbook(), io.BytesIO()
        book.active.append(["name", "value"])
        book.active.append(["a", 1])
        book.save(out)
        return out.getvalue()
    if name == "thunderbird-profile.tar.gz":
        return thunderbird_profile()
    if name == "history_empty.sqlite":
        return empty_chrome_history()
    if suffix == "zip":  # a project folder of the archive's name, as OSWorld's archives hold
        import zipfile

        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            archive.writestr(f"{name[:-4]}/README.md", "An equivalent project made for a local run.\n")
        return out.getvalue()
    if suffix == "gz" or name.endswith(".tar"):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w:gz"):
            pass
        return out.getvalue()
    return b"equivalent input made for a local run\n"


#: the profile OSWorld's thunderbird tasks unpack into the home: its folder name, the mail
#: account they read (an IMAP account of outlook.office365.com) and Local Folders
THUNDERBIRD_PROFILE = "t5q2a5hp.default-release"
#: the profile an install of /usr/lib/thunderbird (Debian's) starts with: its hash of that path
THUNDERBIRD_INSTALL = "InstallFDC34C9F024745EB"
THUNDERBIRD_PREFS = {
    "mail.account.account1.identities": "id1", "mail.account.account1.server": "server1",
    "mail.account.account2.server": "server2", "mail.accountmanager.accounts": "account1,account2",
    "mail.accountmanager.defaultaccount": "account1", "mail.accountmanager.localfoldersserver": "server2",
    "mail.identity.id1.fullName": "Anonym", "mail.identity.id1.useremail": "anonym-x2024@outlook.com",
    "mail.identity.id1.valid": True, "mail.server.server1.type": "imap",
    "mail.server.server1.hostName": "outlook.office365.com", "mail.server.server1.port": 993,
    "mail.server.server1.socketType": 3, "mail.server.server1.userName": "anonym-x2024@outlook.com",
    "mail.server.server1.name": "anonym-x2024@outlook.com",
    "mail.server.server1.directory-rel": "[ProfD]ImapMail/outlook.office365.com",
    "mail.server.server1.login_at_startup": False, "mail.server.server1.check_new_mail": False,
    "mail.server.server2.type": "none", "mail.server.server2.hostName": "Local Folders",
    "mail.server.server2.name": "Local Folders", "mail.server.server2.userName": "nobody",
    "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
    "mail.shell.checkDefaultClient": False, "mailnews.start_page.enabled": False,
    "offline.startup_state": 2,  # these machines are offline: Thunderbird starts so
}


def thunderbird_profile() -> bytes:
    """A Thunderbird profile as OSWorld's tarball holds one: ``.thunderbird/profiles.ini``
    naming the default profile, and in it prefs.js with the mail account and Local Folders."""
    prefs = "".join(f'user_pref("{key}", {json.dumps(value)});\n' for key, value in THUNDERBIRD_PREFS.items())
    files = {
        ".thunderbird/profiles.ini": ("[General]\nStartWithLastProfile=1\nVersion=2\n\n[Profile0]\n"
                                      f"Name=default-release\nIsRelative=1\nPath={THUNDERBIRD_PROFILE}\nDefault=1\n"
                                      f"\n[{THUNDERBIRD_INSTALL}]\nDefault={THUNDERBIRD_PROFILE}\nLocked=1\n"),
        ".thunderbird/installs.ini": f"[{THUNDERBIRD_INSTALL[7:]}]\nDefault={THUNDERBIRD_PROFILE}\nLocked=1\n",
        f".thunderbird/{THUNDERBIRD_PROFILE}/prefs.js": prefs,
        f".thunderbird/{THUNDERBIRD_PROFILE}/ImapMail/outlook.office365.com/msgFilterRules.dat":
            'version="9"\nlogging="no"\n',
        f".thunderbird/{THUNDERBIRD_PROFILE}/Mail/Local Folders/Inbox": "",
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def empty_chrome_history() -> bytes:
    """An empty History database as this machine's Chromium makes it (one headless start)."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(["chromium", "--headless=new", "--no-sandbox", f"--user-data-dir={profile}",
                        "--dump-dom", "about:blank"], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120, check=False)
        history = Path(profile) / "Default" / "History"
        if not history.is_file():
            raise RuntimeError("chromium --headless made no History database")
        with sqlite3.connect(history) as db:  # no rows, and the journal folded in
            db.execute("DELETE FROM urls")
            db.execute("DELETE FROM visits")
        return history.read_bytes()


def fill_cache(folder: Path, index: dict[str, list[str]], root: Path | None = None) -> int:
    """Put an equivalent file in the download cache (``root``, or the user's) for every URL
    of the tasks not there."""
    made = 0
    for domain, ids in index.items():
        for task_id in ids:
            task = json.loads((folder / "examples" / domain / f"{task_id}.json").read_text())
            urls = downloads.urls_in([task.get("config", []), task.get("evaluator", {})])
            if any(step.get("type") == "update_browse_history" for step in task.get("config", [])):
                urls.append(browser_steps.EMPTY_HISTORY_URL)  # the step starts from it
            for url in urls:
                target = downloads.cache_path(url, root)
                if not target.is_file():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(equivalent_file(downloads.basename(url)))
                    made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    """Run the tasks, print per-domain results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--provider", default="process")
    parser.add_argument("--num-rollouts", type=int, default=3)
    parser.add_argument("--num-vms", type=int, default=2)
    parser.add_argument("--domain", default="all")
    parser.add_argument("--only", default="", help="comma-separated task ids (or their prefixes)")
    parser.add_argument("--out", help="output folder (default: a new temporary folder)")
    parser.add_argument("--run-id", default="oracle")
    args = parser.parse_args(argv)
    if args.out is None:  # made only when used: not at every parse, and not with --out
        args.out = tempfile.mkdtemp(prefix="osworld-oracle-")
    folder, _ = osworld_folder(args.data)
    index = reference_index()
    if args.domain != "all":
        index = {args.domain: index[args.domain]}
    if args.only:
        wanted = tuple(args.only.split(","))
        index = {domain: [t for t in ids if t.startswith(wanted)] for domain, ids in index.items()}
        index = {domain: ids for domain, ids in index.items() if ids}
    index_file = Path(args.out) / "oracle_index.json"
    index_file.parent.mkdir(parents=True, exist_ok=True)
    index_file.write_text(json.dumps(index, indent=1))
    os.environ.setdefault(downloads.CACHE_ENV, str(Path(args.out) / "cache"))
    print(f"cache {downloads.cache_root()}: {fill_cache(folder, index)} equivalent inputs made",
          flush=True)
    outcome = Runner(build_config(dict(
        mode="osworld", data=str(folder), osworld_index=str(index_file), agent="oracle",
        action_space="pyautogui", provider_name=args.provider, num_rollouts=args.num_rollouts,
        num_vms=args.num_vms, use_vm_pool=True, output_dir=args.out, run_id=args.run_id,
        progress=False, max_turns=5, task_timeout=600.0, boot_timeout_s=300.0,
        # a desktop's /tmp differs from boot to boot with when its AT-SPI bus came up
        verify_reset="off"))).run()
    records = [json.loads(line) for line in (outcome.run_dir / "results.jsonl").read_text().splitlines()]
    # each sample's last word: its final record, or the one of a sample never graded
    from parallel_rollout.records import sample_ends

    return report(folder, index, list(sample_ends(records).values()), outcome.run_dir)


def report(folder: Path, index: dict[str, list[str]], finals: list[dict], run_dir: Path) -> int:
    """Print per domain the feasible and the infeasible tasks passed; 0 when all passed."""
    kind_of = {}
    for domain, ids in index.items():
        for task_id in ids:
            task = json.loads((folder / "examples" / domain / f"{task_id}.json").read_text())
            infeasible = task.get("evaluator", {}).get("func") == "infeasible"
            kind_of[task_id] = (domain, "infeasible" if infeasible else "feasible")
    passed, total = Counter(), Counter()
    for record in finals:
        key = kind_of[record["task_id"]]
        total[key] += 1
        passed[key] += bool(record.get("success"))
        if not record.get("success"):
            why = (record.get("failure") or {}).get("message") or record.get("eval")
            print(f"  FAIL {key[0]}/{record['task_id']}: {record['status']}: {str(why)[:300]}")
    for domain in sorted({domain for domain, _ in total}):
        print(f"{domain}: feasible {passed[domain, 'feasible']} of {total[domain, 'feasible']} passed, "
              f"infeasible {passed[domain, 'infeasible']} of {total[domain, 'infeasible']}")
    for kind in ("feasible", "infeasible"):
        of_kind = [key for key in total if key[1] == kind]
        print(f"{kind}: {sum(passed[k] for k in of_kind)} of {sum(total[k] for k in of_kind)} passed "
              f"in {len({domain for domain, _ in of_kind})} domains")
    print(f"run folder {run_dir}")
    return 0 if passed == total and len(finals) == len(kind_of) else 1

if __name__ == "__main__":
    sys.exit(main())
