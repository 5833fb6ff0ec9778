"""The Python daemon that forks ``chaos analyze``'s Spark workers (``spark.python.daemon.module``).

Spark starts each executor's Python daemon with its own ``pyspark.zip`` first on ``PYTHONPATH``
(``PythonWorkerFactory``). Python imports from a zip without a bytecode cache, so the daemon
compiled pyspark from source at every start: 1.9 s against 0.45 s from the installed package on
the development machine, paid once per executor before its first task (issue 27). When that zip
is the one inside the installed pyspark package itself (a pip-installed Spark, as ``local[*]``
masters run), both hold the same files, so the daemon drops the zip from ``sys.path`` and imports
the package, byte-compiled at install. Any other zip (a cluster's own Spark) stays first, as Spark
put it. Then it runs pyspark's own daemon (``pyspark.daemon.manager``) unchanged.

Run as ``python -m chaos.history.spark.daemon`` by Spark; nothing else imports it.
"""

from __future__ import annotations

import os
import sys


def installed_copies(path: list[str]) -> list[str]:
    """The entries of ``path`` that are a ``pyspark.zip`` shipped inside an installed pyspark
    package found on ``path`` too (``<dir>/pyspark/python/lib/pyspark.zip`` with ``<dir>`` on
    ``path`` and ``<dir>/pyspark/__init__.py`` present): the same source, importable compiled."""
    out = []
    dirs = {os.path.realpath(p) for p in path if p and not p.endswith(".zip")}
    for entry in path:
        if os.path.basename(entry) != "pyspark.zip":
            continue
        lib = os.path.dirname(os.path.realpath(entry))
        package = os.path.dirname(os.path.dirname(lib))
        if (
            os.path.basename(package) == "pyspark"
            and os.path.dirname(package) in dirs
            and os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            out.append(entry)
    return out


def main() -> None:
    for entry in installed_copies(sys.path):
        sys.path.remove(entry)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
