"""Shared fixtures: the golden histories kept in the repository (tests/data/)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``tests/data``: porcupine's and knossos's test histories (``porcupine/``, ``knossos/``, each
    with its README giving source and licence) and the verdict corpus (``verdicts/``)."""
    for sub in ("porcupine", "knossos"):
        if not (DATA / sub).is_dir():
            pytest.fail(f"test data not found at {DATA / sub}")
    return DATA
