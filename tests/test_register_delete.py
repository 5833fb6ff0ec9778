"""Deletes in the register workload (issue 33, item 3): the cas-register model takes a delete as a
write of nil (knossos, porcupine), the workload draws deletes and its worker maps them onto the
DB client's optional ``delete`` (a client without one fails the op, doing nothing), histories with
deletes are told register histories, and the simulator's register seeds delete keys through the
real driver and stay valid on the correct server."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chaos.history.checkers.linear import check_calls, check_history
from chaos.history.checkers.models import UNKNOWN, Call
from chaos.history.checkers.registry import infer_test
from chaos.history.op import FAIL, INVOKE, OK, Op
from chaos.workloads.register import DELETE_ONE_IN, VALUES, RegisterWorker, _write, workload


def _calls(rows: list[tuple[str, Any, Any, int, int | None]]) -> list[Call]:
    return [Call(i, f, v, o, t0, t1) for i, (f, v, o, t0, t1) in enumerate(rows)]


def test_a_delete_is_a_write_of_nil_in_the_cas_register_model() -> None:
    # write 1, delete, then a read of nil: valid; a read of 1 after the delete returned: invalid
    ok = _calls([("write", 1, 1, 0, 1), ("delete", None, None, 2, 3), ("read", None, None, 4, 5)])
    assert check_calls(ok, "cas-register").valid is True
    back = _calls([("write", 1, 1, 0, 1), ("delete", None, None, 2, 3), ("read", None, 1, 4, 5)])
    assert check_calls(back, "cas-register").valid is False  # the deleted key returned
    # a cas from nil after a delete applies; with an initial value the delete still leaves nil
    again = _calls([("delete", None, None, 0, 1), ("cas", [None, 2], True, 2, 3), ("read", None, 2, 4, 5)])
    assert check_calls(again, "cas-register:init=0").valid is True
    # a delete whose outcome is unknown may or may not have happened
    maybe = _calls([("write", 1, 1, 0, 1), ("delete", None, UNKNOWN, 2, None), ("read", None, 1, 4, 5),
                    ("read", None, None, 6, 7)])  # fmt: skip
    assert check_calls(maybe, "cas-register").valid is True


def test_the_workload_draws_deletes_and_a_history_of_them_is_a_register_history(tmp_path: Path) -> None:
    import random

    ctx = SimpleNamespace(rng=random.Random(5))
    fs = [_write(None, ctx)["f"] for _ in range(600)]  # the mix's write draw
    assert 60 < fs.count("delete") < 150 and DELETE_ONE_IN == VALUES + 1  # one write draw in six
    assert workload({}).model == "cas-register"
    history = tmp_path / "history.jsonl"
    ops = [Op(INVOKE, 0, "write", 1, key=0), Op(OK, 0, "write", 1, key=0), Op(INVOKE, 0, "delete", None, key=0),
           Op(OK, 0, "delete", None, key=0), Op(INVOKE, 0, "read", None, key=0), Op(OK, 0, "read", None, key=0)]  # fmt: skip
    history.write_text("".join(json.dumps(o.to_dict()) + "\n" for o in ops))
    assert infer_test(history)["workload"] == "register"
    assert check_history(ops, "cas-register", workers=1)["valid"] is True


class _Registers:
    """The register protocol on a dict under a lock (a plug-in DB's in-process client)."""

    def __init__(self, values: dict[Any, Any], lock: threading.Lock) -> None:
        self.values, self.lock = values, lock

    def read(self, key: Any) -> Any:
        with self.lock:
            return self.values.get(key)

    def write(self, key: Any, value: Any) -> None:
        with self.lock:
            self.values[key] = value

    def cas(self, key: Any, expected: Any, new: Any) -> bool:
        with self.lock:
            if self.values.get(key) != expected:
                return False
            self.values[key] = new
            return True

    def close(self) -> None:
        pass


class _WithDelete(_Registers):
    def delete(self, key: Any) -> None:
        with self.lock:
            self.values.pop(key, None)


def _test_with(client_class: type) -> Any:
    values: dict[Any, Any] = {3: 4}
    lock = threading.Lock()

    class DB:
        name = "in-process"
        client_protocols = ("register",)

        def open_client(self, protocol: str, test: Any, node: Any, process: Any) -> Any:
            return client_class(values, lock)

    return SimpleNamespace(db=DB(), nodes=[], values=values)


def test_the_worker_deletes_through_the_client_or_fails_without_one() -> None:
    test = _test_with(_WithDelete)
    done = RegisterWorker().open(test, "n1").invoke(test, Op(INVOKE, 0, "delete", None, key=3))
    assert (done.type, done.value) == (OK, None) and 3 not in test.values
    test = _test_with(_Registers)
    refused = RegisterWorker().open(test, "n1").invoke(test, Op(INVOKE, 0, "delete", None, key=3))
    assert refused.type == FAIL and "has no delete" in str(refused.error) and test.values == {3: 4}


def test_simulated_register_seeds_delete_through_the_driver_and_stay_valid(tmp_path: Path) -> None:
    from chaos_dledger.sim import SimOptions, run_seed

    deletes = 0
    for seed in range(3):
        opts = SimOptions("register", ["partition", "kill"], seed, 5.0, 5, 50.0, nemesis_interval=1.0)
        r = run_seed(opts, tmp_path / str(seed))
        assert r.valid is True, r.results
        lines = (tmp_path / str(seed) / "history.jsonl").read_text().splitlines()
        ops = [json.loads(line) for line in lines]
        deletes += sum(1 for o in ops if o.get("f") == "delete" and o.get("type") == "ok")
    assert deletes > 0
