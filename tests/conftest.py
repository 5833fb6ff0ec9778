"""Shared fixtures and suite-wide settings.

- ``shared_data``: the golden histories kept in the repository (``tests/data/``).
- Spark's JVM runs with the C1 JIT only (``-XX:TieredStopAtLevel=1``): the Spark tests are short
  jobs on small data, where C2 compilation costs more CPU than it saves (start-up and the first
  analysis took 109 s with the default JIT, 61 s with C1 only, on the 2-core development machine).
  The jobs and their results are the same; a ``PYSPARK_SUBMIT_ARGS`` set by the caller wins.
- With pytest-xdist (``-n``, ``--dist loadgroup``, see ``setup.cfg``) the docker-marked tests run
  in two streams, each on one worker in file order: the modules on the ``nemtest`` cluster
  (``NEMTEST_MODULES``), and all the others (the default cluster, the modules' own named
  clusters, and any module not listed). Two clusters of different names run side by side; the
  tests of one cluster never overlap (their faults and timing checks must not compete with each
  other on one cluster). The Spark-marked tests run together on one worker, so one JVM serves
  them all (``spark_session`` is getOrCreate); a test marked both runs with the docker tests.
  Everything else is spread over the remaining capacity.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


# The docker modules whose nodes are the ``nemtest`` cluster (``node_cluster`` of
# test_nemesis_support, CHAOS_NEMESIS_CLUSTER): one stream of their own.
NEMTEST_MODULES = frozenset(
    {
        "test_nemesis_clock_lease",
        "test_nemesis_clock_packet",
        "test_nemesis_heal",
        "test_nemesis_partition",
        "test_nemesis_process",
        "test_nemesis_run",
    }
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per shared resource: ``docker-nemtest`` and ``docker`` (clusters), else
    ``spark`` (the JVM). Exactly one group per test: xdist joins several names into a group of
    their own."""
    for item in items:
        if item.get_closest_marker("docker"):
            nemtest = item.path.stem in NEMTEST_MODULES
            item.add_marker(pytest.mark.xdist_group("docker-nemtest" if nemtest else "docker"))
        elif item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``tests/data``: porcupine's and knossos's test histories (``porcupine/``, ``knossos/``, each
    with its README giving source and licence) and the verdict corpus (``verdicts/``)."""
    for sub in ("porcupine", "knossos"):
        if not (DATA / sub).is_dir():
            pytest.fail(f"test data not found at {DATA / sub}")
    return DATA
