"""Shared fixtures and suite-wide settings.

- ``shared_data``: the golden histories kept in the repository (``tests/data/``).
- Spark's JVM runs with the C1 JIT only (``-XX:TieredStopAtLevel=1``): the Spark tests are short
  jobs on small data, where C2 compilation costs more CPU than it saves (start-up and the first
  analysis took 109 s with the default JIT, 61 s with C1 only, on the 2-core development machine).
  The jobs and their results are the same; a ``PYSPARK_SUBMIT_ARGS`` set by the caller wins.
- With pytest-xdist (``-n``, ``--dist loadgroup``, see ``setup.cfg``) the docker-marked tests run
  in two streams, each on one worker in file order, with one cluster up at a time in each:
  ``docker-runs``, whole ``chaos run`` verdict tests (the default cluster, and test_nemesis_run's
  own), and ``docker``, every other module on its own named cluster (the fault mechanisms: clock
  rates, leases, delays, partitions, file faults). Four clusters side by side (one stream per
  cluster) failed a different timing-sensitive test in each CI run on 2 cores; one stream took 19
  minutes. The Spark-marked tests run together on one worker, so one JVM serves them all
  (``spark_session`` is getOrCreate); a test marked both runs with its docker stream. xdist starts
  the largest groups first and spreads the other tests over the workers as they free up.
- Every test runs in an empty working directory of its own (``own_working_directory``), and the
  session's module fixtures in one of the session's: no test sees the checkout's ``store/`` (the
  README's first command leaves ``store/latest`` there, and a bare ``chaos check`` checks it) and
  none writes into it. Paths the suite was started with (a relative ``PYTHONPATH``, ``sys.path``'s
  ``""``) are made absolute first, so subprocesses import the same code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")

# the working directory changes below: what was relative to the one the suite started in stays put
if os.environ.get("PYTHONPATH"):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(p) if p else os.getcwd() for p in os.environ["PYTHONPATH"].split(os.pathsep)
    )
sys.path[:] = [os.path.abspath(p) if p in ("", ".") else p for p in sys.path]


@pytest.fixture(scope="session", autouse=True)
def session_working_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty working directory for the session (module fixtures run in it), never the checkout."""
    with pytest.MonkeyPatch.context() as mp:
        d = tmp_path_factory.mktemp("session-cwd")
        mp.chdir(d)
        yield d


@pytest.fixture(autouse=True)
def own_working_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory for each test: whatever the checkout's (or another test's)
    ``store/`` holds, a test sees none of it (issue 35 item 7b)."""
    d = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(d)
    return d


# the modules of the docker-runs stream; none of the other docker modules touches their clusters
# (the default one, and nemrun)
RUN_STREAM = frozenset(
    {
        "test_run_e2e",
        "test_run_paths",
        "test_run_liveness",
        "test_run_anomalies",
        "test_run_lock",
        "test_gate_real",
        "test_nemesis_effect",
        "test_nemesis_run",
    }
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per shared resource: ``docker-runs`` or ``docker`` (the clusters), else
    ``spark`` (the JVM). Exactly one group per test: xdist joins several names into a group of
    their own."""
    for item in items:
        if item.get_closest_marker("docker"):
            module = item.path.stem
            item.add_marker(pytest.mark.xdist_group("docker-runs" if module in RUN_STREAM else "docker"))
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


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``tests/data``: porcupine's and knossos's test histories (``porcupine/``, ``knossos/``, each
    with its README giving source and licence) and the verdict corpus (``verdicts/``)."""
    for sub in ("porcupine", "knossos"):
        if not (DATA / sub).is_dir():
            pytest.fail(f"test data not found at {DATA / sub}")
    return DATA
