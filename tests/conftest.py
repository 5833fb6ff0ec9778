"""Shared fixtures and suite-wide settings.

- ``shared_data``: the golden histories kept in the repository (``tests/data/``).
- Spark's JVM runs with the C1 JIT only (``-XX:TieredStopAtLevel=1``): the Spark tests are short
  jobs on small data, where C2 compilation costs more CPU than it saves (start-up and the first
  analysis took 109 s with the default JIT, 61 s with C1 only, on the 2-core development machine).
  The jobs and their results are the same; a ``PYSPARK_SUBMIT_ARGS`` set by the caller wins.
- With pytest-xdist (``-n``, ``--dist loadgroup``, see ``setup.cfg``) the docker-marked tests run
  in one stream, on one worker in file order: clusters side by side (one stream per cluster,
  ``CLUSTER_OF``) made the timing-sensitive fault tests (clock rates, leases, leader transfer,
  restarts after file faults) fail under the load of a 2-core machine, a different test per run.
  The Spark-marked tests run together on one worker, so one JVM serves them all
  (``spark_session`` is getOrCreate); a test marked both runs with the docker tests. xdist starts
  the largest groups first and spreads the other tests over the workers as they free up.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


# The cluster each docker module's nodes belong to, by module; a module not listed is taken to use
# the default cluster. ``nemtest``: ``node_cluster`` of test_nemesis_support (CHAOS_NEMESIS_CLUSTER).
CLUSTER_OF = {
    "test_nemesis_clock_lease": "nemtest",
    "test_nemesis_clock_packet": "nemtest",
    "test_nemesis_heal": "nemtest",
    "test_nemesis_partition": "nemtest",
    "test_nemesis_process": "nemtest",
    "test_nemesis_run": "nemtest",
    "test_nemesis_delay": "delaytest",
    "test_nemesis_lazyfs": "lazyfs",
    "test_ssh_control": "tssh",
    "test_cluster_dledger": "tdb",
    "test_cluster_docker": "tcli",
    "test_example_control_util": "tutil",
    "test_example_etcd": "tetcd",
    "test_plugins": "plugtest",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per shared resource: ``docker-<cluster>`` (the cluster's containers), else
    ``spark`` (the JVM). Exactly one group per test: xdist joins several names into a group of
    their own."""
    for item in items:
        if item.get_closest_marker("docker"):
            # one stream for every cluster: side by side (up to 4 clusters with -n 4 on 2 cores)
            # the timing-sensitive fault tests failed under the load, a different one per CI run
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.xdist_group("spark"))


class _GroupSuffixInNodeId:
    """pytest-xdist's loadgroup (3.8) marks a worker's items by appending ``@group`` to
    ``item._nodeid``; pytest 9 derives ``item.nodeid`` from ``item._id`` instead, so the suffix
    never reaches the scheduler and groups would be split across workers. Runs after xdist's hook
    and carries the suffix over (a no-op where the two agree)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from _pytest.nodeid import NodeId

        for item in items:
            renamed = getattr(item, "_nodeid", None)
            if isinstance(renamed, str) and "@" in renamed and item.nodeid != renamed:
                item._id = NodeId.parse(renamed)  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    if importlib.util.find_spec("_pytest.nodeid") is not None:  # pytest >= 9: structured ids
        config.pluginmanager.register(_GroupSuffixInNodeId(), "xdist-group-suffix")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the clusters the nemesis tests kept up across their modules (test_nemesis_support)."""
    support = sys.modules.get("test_nemesis_support")
    if support is not None:
        support.remove_kept_clusters()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``tests/data``: porcupine's and knossos's test histories (``porcupine/``, ``knossos/``, each
    with its README giving source and licence) and the verdict corpus (``verdicts/``)."""
    for sub in ("porcupine", "knossos"):
        if not (DATA / sub).is_dir():
            pytest.fail(f"test data not found at {DATA / sub}")
    return DATA
