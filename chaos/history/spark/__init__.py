"""``chaos analyze`` on Apache Spark: the pipeline (:mod:`chaos.history.spark.pipeline`), the
executors' task (:mod:`chaos.history.spark.tasks`), the statistics (:mod:`chaos.history.spark.stats`),
starting Spark (:mod:`chaos.history.spark.session`) and the workers' daemon
(:mod:`chaos.history.spark.daemon`). Above the checkers, which each task runs.

``spark_session`` is read here from :mod:`chaos.history.spark.session` on first use, so the
workers' daemon (``python -m chaos.history.spark.daemon``) starts without the pipeline.
"""

from __future__ import annotations

from typing import Any

# the sub-package's entry names, read from their module on first use (as chaos.history.checkers.elle
# does): importing one module of the sub-package does not import the others
_LAZY = ("spark_session",)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # deferred: importing one module of the sub-package (the workers' daemon) loads no other
        from chaos.history.spark import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
