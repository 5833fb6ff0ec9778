"""Linearizability checker: golden histories (porcupine, knossos), properties, errors, counterexamples."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.history.checkers.linear import check_calls, check_history
from chaos.history.checkers.models import KV, MODELS, UNKNOWN, BaseModel, Call, get_model
from chaos.history.formats import load_history
from chaos.history.op import Op
from chaos.history.store import HistoryError


def _porcupine_expected(data: Path) -> dict[str, bool | None]:
    text = (data / "porcupine" / "README.md").read_text()
    out: dict[str, bool | None] = {}
    for m in re.finditer(
        r"\| (test_data/\S+\.(?:log|txt)) \|.*?\| (linearizable|NOT linearizable|no test[^|]*) \|", text
    ):
        v = m.group(2)
        out[m.group(1)] = True if v == "linearizable" else False if v == "NOT linearizable" else None
    return out


def test_all_golden_histories(shared_data: Path) -> None:
    """All 109 porcupine and 122 knossos histories get the verdict their READMEs list."""
    expected = _porcupine_expected(shared_data)
    porc = sorted((shared_data / "porcupine" / "test_data").rglob("*.*"))
    porc = [p for p in porc if p.suffix in (".log", ".txt")]
    assert len(porc) == 109
    wrong = []
    decided = 0
    for p in porc:
        rel = str(p.relative_to(shared_data / "porcupine"))
        want = expected.get(rel, True if rel.endswith("-ok.txt") else False)
        ops, model = load_history(p)
        if want is None:  # etcd_095: empty file, no test upstream; no ops is trivially valid
            assert ops == []
            want = True
        r = check_history(ops, model)
        decided += 1
        if r["valid"] is not want:
            wrong.append((rel, r["valid"], want))
    knossos = sorted((shared_data / "knossos" / "data").rglob("*.edn"))
    assert len(knossos) == 122
    for p in knossos:
        want = "/good/" in str(p)
        ops, model = load_history(p)
        r = check_history(ops, model)
        decided += 1
        if r["valid"] is not want:
            wrong.append((str(p), r["valid"], want))
    assert not wrong
    assert decided == 231


def test_knossos_failing_ops(shared_data: Path) -> None:
    """knossos's own tests: cas-failure fails at process 70's read of 0 (history index 491)."""
    ops, model = load_history(shared_data / "knossos/data/cas-register/bad/cas-failure.edn")
    r = check_history(ops, model)
    assert r["valid"] is False
    ce = r["keys"]["all"]["counterexample"]
    ops_by_id = {o["id"]: o for o in ce["ops"]}
    window = [ops_by_id[i] for i in ce["window"]]
    assert any(o["process"] == 70 and o["f"] == "read" and o["output"] == 0 for o in window)


# ------------------------------------------------------------------------------------------------
# property tests: a sequential execution stretched into overlapping intervals


def _history(seed: int, n_ops: int, procs: int, crash: float, keys: int = 1) -> tuple[list[Op], list[int]]:
    """Ops from a real cas register per key, each op taking effect at a point inside its interval.

    Returns the ops and the history positions of ok reads (candidates to corrupt).
    """
    rng = random.Random(seed)
    regs: dict[int, int | None] = {k: None for k in range(keys)}
    # each process runs ops back to back; effects happen at random points in [call, ret]
    t = 0
    events: list[tuple[int, int, Op]] = []
    free_at = [0] * procs
    pid = list(range(procs))
    plans = []
    for _ in range(n_ops):
        p = rng.randrange(procs)
        call = max(free_at[p], t) + rng.randrange(1, 5)
        point = call + rng.randrange(0, 20)
        ret = point + rng.randrange(0, 20)
        free_at[p] = ret + 1
        t = call
        plans.append((point, call, ret, p))
    plans.sort()
    for _point, call, ret, p in plans:
        k = rng.randrange(keys)
        f = rng.choice(["read", "write", "cas"])
        proc = pid[p]
        crashed = f != "read" and rng.random() < crash
        inv: Any
        out: Any
        if f == "read":
            inv, out = None, regs[k]
        elif f == "write":
            inv = rng.randrange(5)
            regs[k] = inv
            out = inv
        else:
            inv = [rng.randrange(5), rng.randrange(5)]
            if regs[k] != inv[0]:
                f_type = "fail"
                out = inv
                events.append((call, 0, Op("invoke", proc, f, inv, time=call, key=k)))
                events.append((ret, 1, Op(f_type, proc, f, out, time=ret, key=k)))
                continue
            regs[k] = inv[1]
            out = inv
        events.append((call, 0, Op("invoke", proc, f, inv, time=call, key=k)))
        if crashed:
            events.append((ret, 1, Op("info", proc, f, inv, time=ret, key=k)))
            pid[p] += procs
        else:
            events.append((ret, 1, Op("ok", proc, f, out, time=ret, key=k)))
    events.sort(key=lambda e: (e[0], e[1]))
    ops = []
    for i, (_, _, op) in enumerate(events):
        op.index = i
        ops.append(op)
    # serialise per process: a process's next call comes after its completion by construction
    reads = [i for i, op in enumerate(ops) if op.type == "ok" and op.f == "read"]
    return ops, reads


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    n_ops=st.integers(1, 60),
    procs=st.integers(1, 6),
    crash=st.sampled_from([0.0, 0.1, 0.3]),
    keys=st.integers(1, 3),
)
def test_generated_histories_are_linearizable(
    seed: int, n_ops: int, procs: int, crash: float, keys: int
) -> None:
    ops, _ = _history(seed, n_ops, procs, crash, keys)
    r = check_history(ops, "cas-register")
    assert r["valid"] is True, r


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    n_ops=st.integers(2, 60),
    procs=st.integers(1, 6),
    crash=st.sampled_from([0.0, 0.2]),
)
def test_one_impossible_read_is_invalid(seed: int, n_ops: int, procs: int, crash: float) -> None:
    ops, reads = _history(seed, n_ops, procs, crash)
    if not reads:
        ops.append(Op("invoke", 999, "read", None, time=10**9, index=len(ops)))
        ops.append(Op("ok", 999, "read", None, time=10**9 + 1, index=len(ops)))
        reads = [len(ops) - 1]
    rng = random.Random(seed)
    i = rng.choice(reads)
    ops[i].value = 17  # never written: values are 0..4
    r = check_history(ops, "cas-register")
    assert r["valid"] is False
    (key,) = r["failures"]
    ce = r["keys"][key]["counterexample"]
    assert ce["window"] and ce["failing"] is not None
    assert len(ce["states"]) == len(ce["prefix"])


# ------------------------------------------------------------------------------------------------
# semantics


def _ops(rows: list[tuple]) -> list[Op]:
    out = []
    for i, row in enumerate(rows):
        t, p, f, v = row[:4]
        extra = row[4] if len(row) > 4 else {}
        out.append(Op(t, p, f, v, time=i, index=i, extra=dict(extra)))
    return out


def test_stale_read_counterexample() -> None:
    ops = _ops(
        [
            ("invoke", 0, "write", 1),
            ("ok", 0, "write", 1),
            ("invoke", 1, "write", 2),
            ("ok", 1, "write", 2),
            ("invoke", 0, "read", None),
            ("ok", 0, "read", 1),
        ]
    )
    r = check_history(ops, "register")
    assert r["valid"] is False and r["failures"] == ["all"]
    ce = r["keys"]["all"]["counterexample"]
    assert ce["prefix"] == [0, 1]
    assert ce["states"] == ["1", "2"]
    assert ce["failing"] == 2 and ce["failing_state"] == "2"
    assert ce["window"] == [1, 2]  # write 2 then read 1: invalid from any state
    json.dumps(r)


def test_crashed_write_may_happen_later() -> None:
    ops = _ops(
        [
            ("invoke", 0, "write", 3),
            ("info", 0, "write", 3),
            ("invoke", 1, "read", None),
            ("ok", 1, "read", None),
            ("invoke", 1, "read", None),
            ("ok", 1, "read", 3),
            ("invoke", 1, "read", None),
            ("ok", 1, "read", None),
        ]
    )
    r = check_history(ops, "cas-register")
    assert r["valid"] is False  # nil after 3: the write cannot be undone
    assert check_history(ops[:6], "cas-register")["valid"] is True


def test_fail_ops_dropped_but_compare_failed_kept() -> None:
    base = [("invoke", 0, "write", 1), ("ok", 0, "write", 1)]
    failed_cas = [("invoke", 1, "cas", [1, 2]), ("fail", 1, "cas", [1, 2])]
    assert check_history(_ops(base + failed_cas), "cas-register")["valid"] is True
    compare_failed = [("invoke", 1, "cas", [1, 2]), ("fail", 1, "cas", [1, 2], {"compare_failed": True})]
    assert check_history(_ops(base + compare_failed), "cas-register")["valid"] is False


def test_keys_split_and_named() -> None:
    ops = []
    for k in range(3):
        ops.append(Op("invoke", k, "write", k, time=2 * k, key=k))
        ops.append(Op("ok", k, "write", k, time=2 * k + 1, key=k))
    ops.append(Op("invoke", 9, "read", None, time=10, key=1))
    ops.append(Op("ok", 9, "read", 2, time=11, key=1))
    r = check_history(ops, "cas-register")
    assert r["valid"] is False
    assert r["failures"] == ["1"]
    assert r["keys"]["0"]["valid"] is True
    assert r["keys"]["2"]["valid"] in (True, "unknown")


def test_time_limit_gives_unknown() -> None:
    # 40 concurrent crashed writes then an impossible read: exponential without a deadline
    ops = []
    for p in range(40):
        ops.append(Op("invoke", p, "write", p, time=p))
    for p in range(40):
        ops.append(Op("info", p, "write", p, time=100 + p))
    for p in range(40, 120):
        ops.append(Op("invoke", p, "read", None, time=1000 + 2 * p))
        ops.append(Op("ok", p, "read", p % 40 if p != 119 else 99, time=1001 + 2 * p))
    r = check_history(ops, "cas-register", time_limit=0.3)
    assert r["valid"] in ("unknown", False)


def _hard_keys(keys: int = 2, writes: int = 40) -> list[Op]:
    """Per key: 40 crashed writes, then a read of a value nobody wrote. Invalid, but the search
    must rule out every subset of the crashed writes (2**40): undecided within seconds."""
    ops: list[Op] = []
    t = 0
    for k in range(keys):
        for w in range(writes):
            for typ in ("invoke", "info"):
                t += 1
                ops.append(Op(typ, 100 * k + w, "write", w, time=t, index=len(ops), key=k))
        for typ, v in (("invoke", None), ("ok", 999)):
            t += 1
            ops.append(Op(typ, 100 * k + 99, "read", v, time=t, index=len(ops), key=k))
    return ops


@pytest.mark.parametrize("workers", [1, 3])
def test_undecided_keys_stay_unknown_with_any_number_of_workers(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12: keys that come back undecided from worker processes (their verdicts unpickled,
    so not the VALID_UNKNOWN object) make the whole check unknown, never valid."""
    import chaos.history.checkers.linear as linear

    from_pool: list[linear.KeyResult] = []
    run_pool = linear._run_pool

    def spy(*args: Any, **kwargs: Any) -> dict[str, linear.KeyResult]:
        out = run_pool(*args, **kwargs)
        from_pool.extend(out.values())
        return out

    monkeypatch.setattr(linear, "_run_pool", spy)
    r = check_history(_hard_keys(), "cas-register", time_limit=5, workers=workers)
    assert r["valid"] == "unknown" and r["failures"] == []
    assert sorted(r["unknown"]) == ["0", "1"]
    assert all(k["valid"] == "unknown" and k["cause"] == "timeout" for k in r["keys"].values())
    if workers == 1:
        assert from_pool == []
    else:  # both keys were decided (as undecided) in worker processes, their verdicts unpickled
        assert len(from_pool) == 2
        assert all(k.valid == "unknown" and k.valid is not linear.VALID_UNKNOWN for k in from_pool)


def test_distinct_keys_get_distinct_labels() -> None:
    """Keys 1, "1", 1.5 and True are four registers with four labels (issue 12 item 3)."""
    from chaos.history.checkers.linear import key_label

    labels = [key_label(k) for k in (1, "1", 1.5, True, None, "null", "a", [1, 2], "[1,2]")]
    assert labels == ["1", '"1"', "1.5", "true", "null", '"null"', "a", "[1,2]", '"[1,2]"']
    ops: list[Op] = []
    for p, (key, value) in enumerate([(1, 5), ("1", 6), (1.5, 7), (True, 8)]):
        ops += [
            Op("invoke", p, "write", value, time=2 * p, key=key),
            Op("ok", p, "write", value, time=2 * p + 1, key=key),
        ]
    for p, (key, value) in enumerate([(1, 5), ("1", 6), (1.5, 7), (True, 8)], start=10):
        ops += [
            Op("invoke", p, "read", None, time=2 * p, key=key),
            Op("ok", p, "read", value, time=2 * p + 1, key=key),
        ]
    r = check_history(ops, "cas-register")
    assert r["valid"] is True
    assert sorted(r["keys"]) == sorted(['"1"', "1", "1.5", "true"])
    assert all(k["ops"] == 2 for k in r["keys"].values())


def test_models_by_spec() -> None:
    assert set(MODELS) >= {"register", "cas-register", "kv", "mutex", "set", "append-log", "multi-register"}
    m = get_model("cas-register:init=0")
    assert m.init() == 0
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        get_model("nope")
    with pytest.raises(ValueError, match="name=value"):
        get_model("cas-register:init")


def test_mutex_set_log_models() -> None:
    def calls(rows: list[tuple]) -> list[Call]:
        return [Call(i, f, v, o, 2 * i, 2 * i + 1) for i, (f, v, o) in enumerate(rows)]

    mutex = calls([("acquire", None, None), ("release", None, None), ("acquire", None, None)])
    assert check_calls(mutex, "mutex").valid is True
    assert check_calls(calls([("acquire", None, None), ("acquire", None, None)]), "mutex").valid is False
    s = calls([("add", 1, None), ("add", 2, None), ("read", None, [2, 1])])
    assert check_calls(s, "set").valid is True
    assert check_calls(calls([("add", 1, None), ("read", None, [])]), "set").valid is False
    log = calls([("append", 1, None), ("append", 2, None), ("read", None, [1, None, 2])])
    assert check_calls(log, "append-log").valid is True
    assert (
        check_calls(
            calls([("append", 1, None), ("append", 2, None), ("read", None, [2, 1])]), "append-log"
        ).valid
        is False
    )
    crashed = [Call(0, "acquire", None, UNKNOWN, 0, None), Call(1, "acquire", None, None, 1, 2)]
    assert check_calls(crashed, "mutex").valid is True


# ------------------------------------------------------------------------------------------------
# malformed input


def test_malformed_jsonl_names_line(tmp_path: Path) -> None:
    p = tmp_path / "history.jsonl"
    good = Op("invoke", 0, "read", None, time=1, index=0).to_json()
    p.write_text(good + "\n" + '{"type": "ok", "process": 0, "f": "read", "value": 1, "time": 2\n')
    with pytest.raises(HistoryError, match=r"line 2"):
        load_history(p)


def test_malformed_edn_names_line(tmp_path: Path) -> None:
    p = tmp_path / "h.edn"
    p.write_text(
        "[{:process 0, :type :invoke, :f :read, :value nil}\n {:process 0, :type :bogus, :f :read}]\n"
    )
    with pytest.raises(HistoryError, match=r"line 2: EDN: unknown :type 'bogus'"):
        load_history(p)
    p.write_text(
        "[{:process 0, :type :invoke, :f :read, :value nil}\n\n {:process 1, :type :ok, :f :read, :value 1}]\n"
    )
    with pytest.raises(HistoryError, match=r"line 3: .*without an open invocation"):
        load_history(p)


def test_edn_and_etcd_input_errors_name_file_and_line(tmp_path: Path) -> None:
    """Deep nesting, bytes that are not UTF-8 and an f the model does not check: HistoryError with
    the file and line, never a RecursionError or a bare ValueError (issue 12 items 4 and 7)."""
    from chaos.history.checkers.models import require_checkable

    p = tmp_path / "h.edn"
    p.write_text(
        "[{:process 0, :type :invoke, :f :write, :value 1}\n {:value " + "[" * 50_000 + "]" * 50_000 + "}]"
    )
    with pytest.raises(HistoryError, match=rf"{p}: line 2: EDN: a value nested deeper than 100 levels"):
        load_history(p)
    p.write_bytes(b'[{:process 0, :type :invoke, :f :write, :value 1}\n\n {:value "\xc3\x28"}]')
    with pytest.raises(HistoryError, match=rf"{p}: line 3: not UTF-8 \(byte 0xc3\)"):
        load_history(p)
    p.write_text(
        "[{:process 0, :type :invoke, :f :frob, :value 1}\n {:process 0, :type :ok, :f :frob, :value 1}]"
    )
    ops, model = load_history(p)
    with pytest.raises(
        HistoryError, match=rf"{p}: line 1: client op f 'frob' is not one the cas-register model"
    ):
        require_checkable(ops, model, p)
    log = tmp_path / "etcd_001.log"
    log.write_bytes(b"INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:ok\t:read\t\xff\n")
    with pytest.raises(HistoryError, match=rf"{log}: line 2: not UTF-8"):
        load_history(log)
    log.write_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 1\t:invoke\t:frob\t1\n")
    ops, model = load_history(log)
    with pytest.raises(HistoryError, match=rf"{log}: line 2: client op f 'frob'"):
        require_checkable(ops, model, log)
    log.write_text("")
    with pytest.raises(HistoryError, match=rf"{log}: no client op"):
        require_checkable(*load_history(log), log)


def test_jepsen_independent_edn_is_split_per_key(tmp_path: Path) -> None:
    """jepsen.independent writes [k v] tuples; each key is its own register (issue 12 item 6)."""
    p = tmp_path / "independent.edn"
    p.write_text(
        "[{:process 0, :type :invoke, :f :write, :value [1 5]}\n"
        " {:process 0, :type :ok, :f :write, :value [1 5]}\n"
        " {:process 1, :type :invoke, :f :write, :value [2 6]}\n"
        " {:process 1, :type :ok, :f :write, :value [2 6]}\n"
        " {:process 2, :type :invoke, :f :cas, :value [2 [6 7]]}\n"
        " {:process 2, :type :info, :f :cas, :value nil}\n"
        " {:process 3, :type :invoke, :f :read, :value [1 nil]}\n"
        " {:process 3, :type :ok, :f :read, :value [1 5]}]\n"
    )
    ops, model = load_history(p)
    assert [(o.key, o.value) for o in ops] == [
        (1, 5),
        (1, 5),
        (2, 6),
        (2, 6),
        (2, [6, 7]),
        (2, None),
        (1, None),
        (1, 5),
    ]
    r = check_history(ops, model)
    assert r["valid"] is True and sorted(r["keys"]) == ["1", "2"]
    # a plain cas-register history ([old new] cas values, scalar reads) is not mistaken for one
    p.write_text(
        "[{:process 0, :type :invoke, :f :cas, :value [0 1]}\n {:process 0, :type :ok, :f :cas, :value [0 1]}\n"
        " {:process 1, :type :invoke, :f :read, :value nil}\n {:process 1, :type :ok, :f :read, :value 1}]\n"
    )
    ops, model = load_history(p)
    assert all(o.key is None for o in ops) and ops[0].value == [0, 1]
    assert check_history(ops, model)["valid"] is True


def test_malformed_etcd_log_names_line(tmp_path: Path) -> None:
    p = tmp_path / "etcd_000.log"
    p.write_text("INFO  jepsen.util - 0\t:invoke\t:read\tnil\ngarbage here\n")
    with pytest.raises(HistoryError, match=r"line 2"):
        load_history(p)


# ------------------------------------------------------------------------------------------------
# pruning by model.extends: the verdict must not change


class _KVNoPrune(KV):
    """The kv model without ``extends``: the plain WGL search, as a reference."""

    extends = BaseModel.extends


def _kv_calls(seed: int, n_ops: int, procs: int, crash: float, puts: float) -> list[Call]:
    """One key's get/put/append calls from a real string store, each taking effect at a random
    point of its interval; crashed appends take effect or not."""
    rng = random.Random(seed)
    state = ""
    free = [0] * procs
    plans = []
    for _ in range(n_ops):
        p = rng.randrange(procs)
        call = free[p] + rng.randrange(1, 6)
        point = call + rng.randrange(0, 15)
        ret = point + rng.randrange(0, 15)
        free[p] = ret + 1
        plans.append((point, call, ret, p))
    plans.sort()
    out: list[Call] = []
    for i, (_point, call, ret, p) in enumerate(plans):
        r = rng.random()
        if r < 0.4:
            out.append(Call(i, "get", None, state, call, ret, p))
        elif r < 0.4 + puts:
            state = f"<{i}>"
            out.append(Call(i, "put", state, None, call, ret, p))
        else:
            v = f"<{i}>"
            if rng.random() < crash:
                if rng.random() < 0.5:
                    state += v
                out.append(Call(i, "append", v, UNKNOWN, call, None, p))
            else:
                state += v
                out.append(Call(i, "append", v, v, call, ret, p))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    n_ops=st.integers(1, 40),
    procs=st.integers(1, 6),
    crash=st.sampled_from([0.0, 0.2]),
    puts=st.sampled_from([0.0, 0.1, 0.3]),
    corrupt=st.booleans(),
)
def test_kv_pruning_keeps_verdicts(
    seed: int, n_ops: int, procs: int, crash: float, puts: float, corrupt: bool
) -> None:
    """Generated kv histories are linearizable; with one get's output changed (to another state the
    store really had, or a never-seen one), pruned and plain searches agree."""
    calls = _kv_calls(seed, n_ops, procs, crash, puts)
    kv = get_model('kv:init=""')
    if not corrupt:
        assert check_calls(calls, kv, counterexample=False).valid is True
        return
    gets = [c for c in calls if c.f == "get"]
    if not gets:
        return
    rng = random.Random(seed + 1)
    g = rng.choice(gets)
    seen = [c.output for c in gets]
    g.output = rng.choice([*seen, g.output + "<x>", g.output[: len(g.output) // 2]])
    got = check_calls(calls, kv, counterexample=False).valid
    want = check_calls(calls, _KVNoPrune(init=""), counterexample=False).valid
    assert got == want


# ------------------------------------------------------------------------------------------------
# against a brute-force reference: every search shortcut must keep the verdict


def _brute(calls: list[Call], model: Any) -> bool:
    """Is there a linearization? The definition, searched exhaustively: an op may go next if no
    other pending op returned before it was called; a crashed op (return None) may be left out."""
    fin = frozenset(c.id for c in calls if c.ret is not None)
    seen: set[tuple[frozenset[int], Any]] = set()

    def go(done: frozenset[int], state: Any) -> bool:
        if fin <= done:
            return True
        if (done, state) in seen:
            return False
        seen.add((done, state))
        pending = [c for c in calls if c.id not in done]
        first_ret = min(c.ret for c in pending if c.ret is not None)
        for c in pending:
            if c.call > first_ret:
                continue
            ok, new = model.step(state, c)
            if ok and go(done | {c.id}, new):
                return True
        return False

    return go(frozenset(), model.init())


def _random_calls(rng: random.Random, model: str, n: int, procs: int) -> list[Call]:
    free = [0] * procs
    out: list[Call] = []
    for i in range(n):
        p = rng.randrange(procs)
        call = free[p] + rng.randrange(0, 4)
        ret: int | None = call + rng.randrange(0, 8)
        free[p] = (ret or 0) + 1
        crashed = rng.random() < 0.2
        if model == "cas-register":
            f = rng.choice(["read", "write", "cas"])
            v: Any = (
                None
                if f == "read"
                else rng.randrange(3)
                if f == "write"
                else [rng.randrange(3), rng.randrange(3)]
            )
            o: Any = (
                rng.choice([None, 0, 1, 2]) if f == "read" else rng.choice([True, False]) if f == "cas" else v
            )
        elif model == 'kv:init=""':
            f = rng.choice(["get", "put", "append"])
            v = None if f == "get" else rng.choice(["a", "b"])
            o = rng.choice(["", "a", "b", "ab", "ba", "aa", "bab"]) if f == "get" else v
        elif model == "mutex":
            f = rng.choice(["acquire", "release"])
            v = o = None
        elif model == "set":
            f = rng.choice(["add", "read"])
            v = None if f == "read" else rng.randrange(3)
            o = [rng.randrange(3) for _ in range(rng.randrange(3))] if f == "read" else None
        else:  # append-log
            f = rng.choice(["append", "read"])
            v = None if f == "read" else rng.randrange(3)
            o = [rng.randrange(3) for _ in range(rng.randrange(3))] if f == "read" else v
        if crashed and f not in ("read", "get"):
            o, ret = UNKNOWN, None
            free[p] = 10**6  # a crashed process never invokes again
        out.append(Call(i, f, v, o, call, ret, p))
    return [c for c in out if c.call < 10**5]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**9),
    model=st.sampled_from(["cas-register", 'kv:init=""', "mutex", "append-log", "set"]),
    n=st.integers(1, 9),
    procs=st.integers(1, 4),
)
def test_search_agrees_with_brute_force(seed: int, model: str, n: int, procs: int) -> None:
    calls = _random_calls(random.Random(seed), model, n, procs)
    m = get_model(model)
    assert check_calls(calls, m, counterexample=False).valid is _brute(calls, m)


def test_parts_left_after_the_budget_go_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no in-process budget every part is checked by worker processes, same verdicts."""
    import chaos.history.checkers.linear as linear

    ops, reads = _history(7, 300, 4, 0.05, keys=6)
    assert check_history(ops, "cas-register", workers=1)["valid"] is True
    monkeypatch.setattr(linear, "POOL_AFTER", 0.0)
    pooled: list[int] = []
    real_pool = linear._run_pool

    def spy(tasks: list, *args: Any) -> Any:
        pooled.append(len(tasks))
        return real_pool(tasks, *args)

    monkeypatch.setattr(linear, "_run_pool", spy)
    r = check_history(ops, "cas-register", workers=2)
    assert r["valid"] is True and len(r["keys"]) == 6
    assert pooled == [6]
    ops[reads[len(reads) // 2]].value = 17
    r = check_history(ops, "cas-register", workers=2)
    assert r["valid"] is False and len(r["failures"]) == 1
    assert r["keys"][r["failures"][0]]["counterexample"]["window"]


@pytest.mark.parametrize("min_rest, pooled_parts", [(1e6, []), (0.0, [5])])
def test_a_short_rest_is_checked_without_a_pool(
    monkeypatch: pytest.MonkeyPatch, min_rest: float, pooled_parts: list[int]
) -> None:
    """Past the in-process budget the parts left go to a pool only when, at the pace of the first
    round so far, they would take POOL_MIN_REST seconds or more (a clock that moves 0.15 s a
    reading: the budget ends after the first part, whatever this machine's speed)."""
    import time as real_time
    from types import SimpleNamespace

    import chaos.history.checkers.linear as linear

    ops, _ = _history(7, 300, 4, 0.05, keys=6)
    readings = [0]

    def monotonic() -> float:  # ahead of the real clock, so no search deadline comes early
        readings[0] += 1
        return real_time.monotonic() + 0.15 * readings[0]

    monkeypatch.setattr(linear, "time", SimpleNamespace(monotonic=monotonic))
    monkeypatch.setattr(linear, "POOL_MIN_REST", min_rest)
    pooled: list[int] = []
    real_pool = linear._run_pool

    def spy(tasks: list[Any], *args: Any) -> Any:
        pooled.append(len(tasks))
        return real_pool(tasks, *args)

    monkeypatch.setattr(linear, "_run_pool", spy)
    r = check_history(ops, "cas-register", workers=2)
    assert r["valid"] is True and len(r["keys"]) == 6
    assert pooled == pooled_parts


def test_each_bad_kv_key_fails_alone(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key of porcupine's kv/c50-bad is invalid on its own, found within 100,000 configs
    (the plain WGL search needs millions for keys 0, 7 and 9; porcupine relies on another key failing
    first)."""
    import chaos.history.checkers.linear as linear
    import chaos.history.checkers.wgl as wgl

    monkeypatch.setattr(wgl, "MAX_CONFIGS", 100_000)
    ops, spec = load_history(shared_data / "porcupine/test_data/kv/c50-bad.txt")
    m = get_model(spec)
    groups, _ = linear.history_calls(ops)
    verdicts = {}
    for key, calls in groups.items():
        calls.sort(key=lambda c: (c.call, c.index))
        verdicts[key] = check_calls(calls, m, counterexample=False).valid
    assert len(verdicts) == 10
    assert all(v is False for v in verdicts.values()), verdicts
