"""Property test: random appends, truncations, syncs, reopens and lost unsynced writes on a
FileLogStore agree with a SimLogStore model; the inspector verifies the files afterwards."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from store_records import next_pos

from dledger.sim import SimLogStore
from dledger.store import Entry
from dledger.store.file import FileLogStore
from dledger.tools.inspect import inspect_store

DATA = 4096
INDEX = 4096

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 12), st.integers(0, 900), st.booleans()),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("sync")),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("crash"), st.booleans()),
        st.tuples(st.just("lose_unsynced")),
        st.tuples(st.just("compact"), st.integers(0, 200)),
    ),
    max_size=40,
)


def open_store(d: Path, verify_newest: bool = False) -> FileLogStore:
    return FileLogStore(
        d,
        data_file_size=DATA,
        index_file_size=INDEX,
        cache_entries=8,
        verify_files=1 if verify_newest else None,
    )


def lose_unsynced(d: Path, data_pos: int, index_pos: int) -> None:
    """A power loss as the test's own page-cache model sees it: every segment file is cut back to
    what the last sync made durable (``data_pos`` / ``index_pos``: global byte positions over the
    files named by their start offset); files that begin past it are removed (the first kept)."""
    for sub, pos, size in (("data", data_pos, DATA), ("index", index_pos, INDEX)):
        files = sorted((d / sub).iterdir(), key=lambda p: int(p.name))
        for i, p in enumerate(files):
            keep = max(0, min(pos - int(p.name), size))
            if keep == 0 and i > 0:
                p.unlink()
            elif keep < p.stat().st_size:
                os.truncate(p, keep)


def check_equal(s: FileLogStore, model: SimLogStore) -> None:
    assert (s.end_index, s.end_term) == (model.end_index, model.end_term)
    for i in range(s.begin_index, model.end_index + 1):
        a, b = s.get(i), model.get(i)
        assert (a.index, a.term, a.body, a.magic) == (b.index, b.term, b.body, b.magic)
        assert s.term_at(i) == b.term


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_file_store_matches_memory_model(program: list[tuple]) -> None:  # type: ignore[type-arg]
    d = Path(tempfile.mkdtemp(prefix="store-prop-"))
    try:
        s = open_store(d)
        model = SimLogStore()
        term = 1
        synced = -1
        durable_pos, durable_index = 0, -1  # what the store last fsynced (for lose_unsynced)
        begin = 0
        for op in program:
            kind = op[0]
            if kind == "append":
                _, n, size, bump = op
                term += int(bump)
                for _ in range(n):
                    i = model.end_index + 1
                    body = bytes([i % 251]) * (size + i % 7)
                    model.append(Entry(i, term, body))
                    s.append(Entry(i, term, body))
            elif kind == "compact":
                if s.end_index >= s.begin_index:
                    target = max(s.begin_index, s.end_index - op[1] % 8)
                    new_begin = s.compact_prefix(target)
                    assert s.begin_index == new_begin <= target
                    begin = new_begin
                    event(f"compacted to begin>0: {begin > 0}")
                    s.sync()
                    synced = model.end_index
                    durable_pos, durable_index = next_pos(s), s.end_index
            elif kind == "truncate":
                keep = max(-1, model.end_index - op[1], s.begin_index - 1 if s.begin_index else -1)
                if s.begin_index and keep < s.begin_index:
                    continue  # the compacted prefix stays (see FileLogStore.truncate_suffix)
                cut = s.get(keep + 1).pos if keep < s.end_index else next_pos(s)
                model.truncate_suffix(keep)
                s.truncate_suffix(keep)
                synced = min(synced, keep)
                durable_pos, durable_index = min(durable_pos, cut), min(durable_index, keep)
            elif kind == "sync":
                synced = s.sync()
                assert synced == model.end_index
                durable_pos, durable_index = next_pos(s), s.end_index
            elif kind in ("reopen", "crash"):
                s.close(sync=kind == "reopen")
                if kind == "reopen":
                    synced = model.end_index
                s = open_store(d, op[1])
                assert s.recovery.cut_reason is None or "blank" in s.recovery.cut_reason
                durable_pos, durable_index = next_pos(s), s.end_index  # recovery fsyncs what it found
            elif kind == "lose_unsynced":
                s.close(sync=False)
                lose_unsynced(d, durable_pos, (durable_index + 1) * 32)
                s = open_store(d)
                # Everything synced survives; what survives beyond is a prefix of the model.
                assert s.end_index >= synced, s.recovery.describe()
                assert s.end_index <= model.end_index
                model.truncate_suffix(s.end_index)
                durable_pos, durable_index = next_pos(s), s.end_index
            assert s.begin_index == begin
            check_equal(s, model)
        s.close()
        ins = inspect_store(d)
        assert ins.ok, ins.problems
        assert (ins.end_index, ins.end_term) == (model.end_index, model.end_term)
        assert ins.begin_index == s.begin_index
    finally:
        shutil.rmtree(d, ignore_errors=True)
