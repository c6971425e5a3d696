"""How ./dev test shares the suite out to its pytest-xdist workers (tests/conftest.py): the
providers' tests on one worker (but the process provider's own files), the Ray clusters' on one, a module with a module-scoped fixture
whole on one, every other test wherever a worker is free. Driven through xdist's own scheduler
with two stand-in workers that record what they are sent."""

from __future__ import annotations

import types

import pytest

from conftest import pytest_xdist_make_scheduler, xdist_scope

pytest.importorskip("xdist")

IDS = ([f"tests/providers/test_docker.py::test_boot[{i}]" for i in range(4)]
       + [f"tests/providers/test_contract.py::test_lease[{i}]" for i in range(4)]
       + [f"tests/test_ray_driver.py::test_node[{i}]" for i in range(3)]
       + [f"tests/test_hostile_answers.py::test_row[{i}]" for i in range(6)]
       + [f"tests/test_cli_conventions.py::test_plain[{i}]" for i in range(12)])


class Worker:
    """What xdist's scheduler calls on a worker, recording the tests it is sent."""

    def __init__(self, name: str):
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[str] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes):
        self.sent += [IDS[i] for i in indexes]

    def send_runtest_all(self):
        self.sent += IDS

    def shutdown(self):
        self.shutting_down = True


def test_a_test_s_work_unit():
    assert xdist_scope("tests/providers/test_qemu.py::test_x") == "providers"
    assert xdist_scope("tests/test_ray_backend.py::test_x[a]") == "ray"
    assert xdist_scope("tests/test_hostile_answers.py::test_row[x]") == "tests/test_hostile_answers.py"
    assert xdist_scope("tests/test_cli_conventions.py::test_plain[1]") == "tests/test_cli_conventions.py::test_plain[1]"


def test_two_workers_are_sent_each_group_whole_and_the_rest_shared():
    config = types.SimpleNamespace(
        getvalue=lambda name: {"dist": "loadgroup", "tx": ["2*popen"]}[name],
        option=types.SimpleNamespace(loadscopereorder=True, maxschedchunk=None))
    scheduler = pytest_xdist_make_scheduler(config, None)
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, IDS)
    scheduler.schedule()
    done: set[tuple[str, str]] = set()
    while scheduler.has_pending:  # each worker ends what it was sent and is sent more
        for worker in workers:
            for nodeid in [n for n in worker.sent if (worker.gateway.id, n) not in done]:
                done.add((worker.gateway.id, nodeid))
                scheduler.mark_test_complete(worker, IDS.index(nodeid))
    for prefix in ("tests/providers/", "tests/test_ray_", "tests/test_hostile_answers.py"):
        holders = {w.gateway.id for w in workers for nodeid in w.sent if nodeid.startswith(prefix)}
        assert len(holders) == 1, (prefix, [w.sent for w in workers])
    assert sorted(nodeid for w in workers for nodeid in w.sent) == sorted(IDS)
    plain = [{nodeid for nodeid in w.sent if nodeid.startswith("tests/test_cli_conventions.py")} for w in workers]
    assert all(plain), "the tests of no group went to one worker only"


def test_the_process_providers_own_tests_are_shared_out_like_any_other():
    """The providers' group holds what its tests share once per machine (the Docker daemon,
    the docker and QEMU images, tests of every provider); a test file of the process provider
    alone shares none of it, so its tests go wherever a worker is free (a module-scoped
    fixture's module whole), not onto the one worker of the group, the suite's longest."""
    for module in ("test_process.py", "test_process_leftovers.py", "test_host_share.py",
                   "test_halted.py", "test_machine_settings.py"):
        nodeid = f"tests/providers/{module}::test_x[a]"
        assert xdist_scope(nodeid) == nodeid
    assert xdist_scope("tests/providers/test_process_fronts.py::test_x[a]") == "tests/providers/test_process_fronts.py"
    for module in ("test_contract.py", "test_docker_snapshots.py", "test_qemu.py", "test_images.py",
                   "test_hypervisors.py", "test_death_cause.py", "test_verify_machines.py"):
        assert xdist_scope(f"tests/providers/{module}::test_x") == "providers"
