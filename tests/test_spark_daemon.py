"""Which ``pyspark.zip`` the workers' daemon drops from ``sys.path`` (pure logic; the daemon itself
runs under real Spark in tests/test_spark_pipeline.py)."""

from __future__ import annotations

from pathlib import Path

from chaos.history.spark.daemon import installed_copies


def _spark_home(site: Path) -> Path:
    """A pip-installed pyspark under ``site``; returns the zip Spark puts on the workers' path."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    return lib / "pyspark.zip"


def test_the_zip_inside_the_installed_package_is_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zip_ = _spark_home(site)
    py4j = zip_.parent / "py4j-0.10.9.9-src.zip"
    path = [str(zip_), str(py4j), "/usr/lib/python311.zip", str(site)]
    assert installed_copies(path) == [str(zip_)]


def test_a_zip_of_another_spark_stays(tmp_path: Path) -> None:
    installed = tmp_path / "site-packages"
    _spark_home(installed)
    cluster = tmp_path / "opt" / "spark" / "python" / "lib"
    cluster.mkdir(parents=True)
    (cluster / "pyspark.zip").write_bytes(b"")
    assert installed_copies([str(cluster / "pyspark.zip"), str(installed)]) == []


def test_the_zip_stays_when_its_package_is_not_on_the_path(tmp_path: Path) -> None:
    zip_ = _spark_home(tmp_path / "site-packages")
    assert installed_copies([str(zip_), str(tmp_path / "elsewhere")]) == []
    (tmp_path / "site-packages" / "pyspark" / "__init__.py").unlink()
    assert installed_copies([str(zip_), str(tmp_path / "site-packages")]) == []
