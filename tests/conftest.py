"""Shared fixtures and suite-wide settings.

- ``shared_data``: the golden histories kept in the repository (``tests/data/``).
- Spark's JVM runs with the C1 JIT only (``-XX:TieredStopAtLevel=1``): the Spark tests are short
  jobs on small data, where C2 compilation costs more CPU than it saves (start-up and the first
  analysis took 109 s with the default JIT, 61 s with C1 only, on the 2-core development machine).
  The jobs and their results are the same; a ``PYSPARK_SUBMIT_ARGS`` set by the caller wins.
- With pytest-xdist (``-n``, ``--dist loadgroup``, see ``setup.cfg``) the docker-marked tests run
  on one worker, in file order: they share the Docker engine, the default cluster and the node
  image, and their timing-sensitive faults (clock, delay, partitions) must not compete with each
  other. The Spark-marked tests run together on another worker, so one JVM serves them all
  (``spark_session`` is getOrCreate). A test marked both runs with the docker tests. Everything
  else is spread over the remaining capacity.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per shared resource: ``docker`` (engine, clusters), else ``spark`` (the JVM).
    Exactly one group per test: xdist joins several names into a group of their own."""
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(pytest.mark.xdist_group("docker"))
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
