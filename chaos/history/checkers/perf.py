"""Performance and availability: latency quantiles, throughput over time, unavailability windows.

After ``jepsen.checker/perf`` and ``jepsen.checker.perf`` (latency-quantiles, rate). Fault windows
and availability follow the one rule of :mod:`chaos.history.analysis` (docs/design.md: a window of
kind ``<kind>`` lasts from the completion of ``start-<kind>`` to the completion of ``stop-<kind>``).

- **latency** of each client op = completion time - invocation time, in milliseconds; p50, p95,
  p99 (nearest rank), max, mean and count per f and completion type; again per fault window (an
  op counts in every window active when it was invoked) and for ops invoked outside any fault.
- **throughput**: completions per 1-second bucket, per f and type, from time 0 (the test start).
- **availability**: the longest windows with no ok client op while clients were trying (an op was
  in flight or invoked), each aligned with the nemesis op that preceded it, e.g. "leader n1 killed
  at 31.2 s, first ok append 0.74 s later".

The checker streams: per completion it keeps 8 bytes of latency, never the ops. It is always
valid (performance is reported, not judged).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from chaos.history.analysis import (
    FAIL_CLASSES,
    UNSUPPORTED,
    Availability,
    FaultWindows,
    fail_class,
    fault_name,
    fault_names,
    fault_value,
)
from chaos.history.op import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from chaos.history.verdict import Accumulator, StreamChecker

NS = 1_000_000_000
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
TOP_WINDOWS = 10
MAX_NEMESIS_LISTED = 2000

# The verbs of runs recorded before test.json carried ``nemesis_styles`` (data, not code: a run
# records its fault modules' own phrases, chaos.nemesis.styles). ``{nodes}`` is the faulted nodes;
# a ``[...]`` group holding it is left out when no node is known.
LEGACY_VERBS: dict[str, dict[str, str]] = {
    "kill": {"start": "{nodes} killed", "stop": "{nodes} restarted"},
    "pause": {"start": "{nodes} paused", "stop": "{nodes} resumed"},
    "partition": {"start": "{nodes} partitioned", "stop": "partition healed"},
    "clock": {"start": "[{nodes} ]clock skewed", "stop": "clocks reset"},
    "packet": {"start": "[{nodes} ]packet faults started", "stop": "packet faults stopped"},
    "file": {"start": "{nodes} file corrupted", "stop": "{nodes} file corruption stopped"},
    "leader-transfer": {"start": "{nodes} leadership transferred"},
}


def nemesis_verbs(test: object) -> dict[str, dict[str, str]]:
    """``{op kind: {"start": phrase, "stop": phrase}}`` for a run: its test.json's
    ``nemesis_styles`` (``{kind: {"colour", "verbs"}}``, written by the runner from the fault
    modules' descriptors), else :data:`LEGACY_VERBS` for runs recorded before it."""
    styles = test.get("nemesis_styles") if isinstance(test, dict) else None
    if not isinstance(styles, dict):
        return LEGACY_VERBS
    out: dict[str, dict[str, str]] = {}
    for kind, style in styles.items():
        verbs = style.get("verbs") if isinstance(style, dict) else None
        if isinstance(verbs, dict):
            out[str(kind)] = {k: v for k, v in verbs.items() if k in ("start", "stop") and isinstance(v, str)}
    return out


def _phrase(template: str, subject: str, kind: str, start: bool) -> str:
    """A verb template with ``subject`` for ``{nodes}``; without a subject, an optional ``[...]``
    group goes, and a required ``{nodes}`` gives ``"<kind> fault started (<rest>)"``."""
    if subject:
        return template.replace("[", "").replace("]", "").replace("{nodes}", subject)
    bare = template
    while "[" in bare and "]" in bare.split("[", 1)[1]:
        head, tail = bare.split("[", 1)
        bare = head + tail.split("]", 1)[1]
    if "{nodes}" not in bare:
        return bare.strip()
    rest = " ".join(bare.replace("{nodes}", "").split())
    return f"{kind} fault {'started' if start else 'stopped'} ({rest})"


def quantiles(values: array[int] | list[int]) -> dict[str, object]:
    """``{"count", "p50", "p95", "p99", "max", "mean"}`` of ns values, in ms (nearest-rank quantiles)."""
    n = len(values)
    if n == 0:
        return {"count": 0}
    s = sorted(values)
    out: dict[str, object] = {"count": n}
    for name, q in QUANTILES:
        out[name] = round(s[min(n - 1, max(0, math.ceil(q * n) - 1))] / 1e6, 3)
    out["max"] = round(s[-1] / 1e6, 3)
    out["mean"] = round(sum(s) / n / 1e6, 3)
    return out


def _nodes_of(value: object) -> list[str]:
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return list(value)
    if isinstance(value, dict):
        for k in ("nodes", "targets", "node", "target"):
            v = value.get(k)
            if isinstance(v, str):
                return [v]
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return list(v)
        if isinstance(value.get("grudge"), dict):
            return []
    if isinstance(value, str) and value.startswith("n") and value[1:].isdigit():
        return [value]
    return []


def _partition_phrase(value: object) -> str:
    if not isinstance(value, dict):
        return f"network partitioned ({value})" if isinstance(value, str) else "network partitioned"
    grudge = value.get("grudge")
    if isinstance(grudge, dict) and grudge:
        everyone = set(grudge) | {n for drops in grudge.values() if isinstance(drops, list) for n in drops}
        alone = sorted(
            n for n, drops in grudge.items() if isinstance(drops, list) and set(drops) == everyone - {n}
        )
        if alone and len(alone) < len(everyone) - 1:
            return f"{', '.join(alone)} cut off by a partition"
    shape = value.get("shape") or value.get("spec")
    if isinstance(shape, str):
        return f"network partitioned ({shape})"
    nodes = _nodes_of(value)
    return f"{', '.join(nodes)} partitioned" if nodes else "network partitioned"


def describe_nemesis(
    f: str,
    value: object,
    verbs: dict[str, dict[str, str]] | None = None,
    names: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """A short phrase for a nemesis op, e.g. ``"leader n1 killed"``, ``"partition healed"``,
    ``"lose-unfsynced: n2, n3 data files cut back"``.

    Reads the fault from the op's value (docs/design.md): ``nodes``/``targets``/``node``, a
    ``grudge`` for partitions, ``leader: true`` or a ``primaries`` spec for the leader. ``verbs``:
    the run's phrases (:func:`nemesis_verbs`; default :data:`LEGACY_VERBS`); a kind without one
    is described neutrally as ``"<f> <nodes>"``. ``names``: the run's typed fault names
    (:func:`chaos.history.analysis.fault_names`): a verb's ``{name}`` is the fault as typed, and
    a phrase without it starts with that name when it is not the op kind itself.
    """
    verbs = LEGACY_VERBS if verbs is None else verbs
    if f.startswith("start-"):
        kind, start = f[6:], True
    elif f.startswith("stop-"):
        kind, start = f[5:], False
    else:
        return f
    name = fault_name(kind, names or {}, value)
    template = (verbs.get(kind) or {}).get("start" if start else "stop")
    if template is not None and "{name}" in template:
        return _nemesis_phrase(kind, start, value, template.replace("{name}", name))
    phrase = _nemesis_phrase(kind, start, value, template)
    return phrase if name == kind else f"{name}: {phrase}"


def _nemesis_phrase(kind: str, start: bool, value: object, template: str | None) -> str:
    """:func:`describe_nemesis`'s phrase from the op kind, its value and the verb ``template``."""
    f = f"{'start' if start else 'stop'}-{kind}"
    if kind == "partition" and start:
        return _partition_phrase(value)
    nodes = _nodes_of(value)
    leader = isinstance(value, dict) and (
        value.get("leader") is True
        or value.get("role") == "leader"
        or value.get("targets") in ("primaries", "leader")
        or value.get("spec") in ("primaries", "leader")
    )
    subject = ", ".join(nodes)
    if leader:
        subject = f"leader {subject}".strip()
    if template is None:
        return f"{f} {subject}".strip()
    return _phrase(template, subject, kind, start)


_OUTSIDE = ("none",)


def ops_line(ops: dict[str, object]) -> str:
    """``"2975 ops: 1700 ok, 1203 fail (764 no match, 439 unavailable), 72 info"`` from the perf
    checker's ``ops`` (a cas whose compare did not match is an answer, not an outage)."""
    aborted = f"{ops['fail_aborted']} aborted, " if ops.get("fail_aborted") else ""
    if ops.get("fail_unsupported"):  # the client has no such method: not the DB's
        aborted += f"{ops['fail_unsupported']} unsupported by the client, "
    crashed = f" ({ops['client_errors']} client errors)" if ops.get("client_errors") else ""
    return (
        f"{ops.get('count', 0)} ops: {ops.get('ok', 0)} ok, {ops.get('fail', 0)} fail "
        f"({ops.get('fail_no_match', 0)} no match, {aborted}{ops.get('fail_unavailable', 0)} unavailable), "
        f"{ops.get('info', 0)} info{crashed}"
    )


class _Series:
    """Latencies (ns) of one f and completion type: all of them, per fault-window group, and the
    completions per 1-s bucket."""

    __slots__ = ("all", "groups", "counts")

    def __init__(self) -> None:
        self.all = array("q")
        self.groups: dict[Hashable, array[int]] = {}
        self.counts: list[int] = []


class _PerfAcc:
    def __init__(
        self,
        top: int,
        verbs: dict[str, dict[str, str]] | None = None,
        names: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.top = top
        self.verbs = LEGACY_VERBS if verbs is None else verbs
        self.names = dict(names or {})  # op kind -> the --nemesis names typed (analysis.fault_names)
        self.open: dict[Hashable, tuple[int, tuple[int, ...], str]] = {}
        self.series: dict[tuple[str, str], _Series] = {}  # (f, type) -> latencies and counts
        self.faults = FaultWindows()  # the one fault-window rule (chaos.history.analysis)
        self.avail = Availability(top)
        self.nemesis: list[dict[str, Any]] = []
        self.nemesis_count = 0
        self.end_time = 0
        self.fails = {c: 0 for c in FAIL_CLASSES}  # fail completions apart (analysis.fail_class)
        self.client_errors = 0  # completions whose client crashed (chaos.history.checkers.clienterrors)

    def _nemesis(self, op: Op) -> None:
        inv = self.faults.step(op)
        if inv is None:
            return
        self.nemesis_count += 1
        if len(self.nemesis) < MAX_NEMESIS_LISTED:
            self.nemesis.append(
                {
                    "f": op.f,
                    "invoke_s": inv.time / NS,
                    "complete_s": op.time / NS,
                    "value": fault_value(inv, op),
                    "index": inv.index,
                }
            )

    def step(self, op: Op) -> None:
        t = op.time
        if t > self.end_time:
            self.end_time = t
        if op.process == NEMESIS:
            self._nemesis(op)
            return
        if op.type == INVOKE:
            self.open[op.process] = (t, self.faults.active_ids, op.f)
            self.avail.invoke(t)
            return
        inv = self.open.pop(op.process, None)
        if inv is None:
            return
        t0, wins, f = inv
        lat = t - t0
        typ = op.type
        ser = self.series.get((f, typ))
        if ser is None:
            ser = self.series[(f, typ)] = _Series()
        ser.all.append(lat)
        groups = ser.groups
        for g in wins or _OUTSIDE:
            a = groups.get(g)
            if a is None:
                a = groups[g] = array("q")
            a.append(lat)
        b = t // NS if t > 0 else 0
        counts = ser.counts
        if b >= len(counts):
            counts.extend([0] * (b + 1 - len(counts)))
        counts[b] += 1
        cls = fail_class(op) if typ == FAIL else None
        if cls is not None:
            self.fails[cls] += 1
        crashed = bool(op.extra and "client_error" in op.extra)
        if cls == UNSUPPORTED or crashed:  # the DB was not asked: out of availability
            if crashed:  # an unsupported op is no crash: the client-errors checker does not count it
                self.client_errors += 1
            self.avail.withdraw()
            return
        self.avail.complete(t, typ, f)

    def _by_f(self, group: object) -> dict[str, dict[str, object]]:
        """Quantiles per f and type for one group: "all", "none" (outside faults) or a window id."""
        out: dict[str, dict[str, object]] = {}
        for (f, typ), ser in sorted(self.series.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            a = ser.all if group == "all" else ser.groups.get(group)
            if a is not None:
                out.setdefault(f, {})[typ] = quantiles(a)
        return out

    def _by_f_all(self) -> dict[str, dict[str, object]]:
        """Quantiles per f over every completion type together (what ``chaos analyze`` shows)."""
        per_f: dict[str, list[array[int]]] = {}
        for (f, _typ), ser in self.series.items():
            per_f.setdefault(f, []).append(ser.all)
        return {f: quantiles([x for a in arrays for x in a]) for f, arrays in sorted(per_f.items())}

    def _totals(self) -> dict[str, int]:
        """Client completions by type, with the fails apart: ``count``, ``ok``, ``fail``, ``info``,
        ``fail_no_match``, ``fail_aborted``, ``fail_unsupported``, ``fail_unavailable``."""
        by = {t: 0 for t in (OK, FAIL, INFO)}
        for (_f, typ), ser in self.series.items():
            by[typ] = by.get(typ, 0) + len(ser.all)
        out = {"count": sum(by.values()), **by}
        out.update({f"fail_{c.replace('-', '_')}": n for c, n in self.fails.items()})
        out["client_errors"] = self.client_errors
        return out

    def _align(self, start: int, end: int | None) -> tuple[dict[str, Any] | None, bool]:
        """The nemesis op behind an unavailability window and whether it lies inside the window: the
        first one completed inside it, else the last one completed before it (a fault is in place
        once its op completes, as the fault windows count)."""
        inside = [
            n
            for n in self.nemesis
            if start / NS <= n["complete_s"] <= (end if end is not None else 2**62) / NS
        ]
        if inside:
            return inside[0], True
        before = [n for n in self.nemesis if n["complete_s"] < start / NS]
        return (before[-1] if before else None), False

    def _window(self, dur: int, start: int, end: int | None, f: str | None) -> dict[str, object]:
        w: dict[str, object] = {
            "start_s": round(start / NS, 3),
            "end_s": round(end / NS, 3) if end is not None else None,
            "duration_s": round(dur / NS, 3),
            "first_ok_f": f,
        }
        nem, inside = self._align(start, end)
        active = sorted(
            {
                fault_name(x.kind, self.names, x.invocation.value)
                for x in self.faults.windows
                if x.start <= (end if end is not None else self.end_time)
                and (x.end is None or x.end >= start)
            }
        )
        w["faults_active"] = active
        until = f"first ok {f} at {end / NS:.1f} s" if end is not None else "no ok op until the end"
        if nem is not None:
            w["nemesis"] = {
                "f": nem["f"],
                "value": nem["value"],
                "time_s": round(nem["complete_s"], 3),
                "invoke_s": round(nem["invoke_s"], 3),
                "index": nem["index"],
                "inside": inside,
            }
            what = describe_nemesis(nem["f"], nem["value"], self.verbs, self.names)
            t = nem["complete_s"]
            if not inside:
                w["summary"] = (
                    f"no ok op for {dur / NS:.2f} s from {start / NS:.1f} s ({until}), after {what} at {t:.1f} s"
                )
            elif end is None:
                w["summary"] = (
                    f"{what} at {t:.1f} s, no ok op until the end ({(self.end_time / NS - t):.2f} s later)"
                )
            else:
                w["summary"] = f"{what} at {t:.1f} s, first ok {f} {end / NS - t:.2f} s later"
        else:
            w["summary"] = (
                f"no ok op for {dur / NS:.2f} s from {start / NS:.1f} s ({until}), no fault before it"
            )
        return w

    def finish(self) -> dict[str, object]:
        windows_out = [
            self._window(g.duration, g.start, g.end, g.first_ok_f) for g in self.avail.finish(self.end_time)
        ]
        faults = []
        for w in self.faults.windows:
            faults.append(
                {
                    "id": w.id,
                    "kind": w.kind,
                    "start_s": round(w.start / NS, 3),
                    "end_s": round(w.end / NS, 3) if w.end is not None else None,
                    "value": w.value,
                    "latency": self._by_f(w.id),
                }
            )
        throughput = [
            {"f": f, "type": typ, "bucket_s": 1, "start_s": 0, "counts": counts}
            for (f, typ), counts in sorted((k, v.counts) for k, v in self.series.items())
        ]
        ok_total = sum(sum(v.counts) for (_, typ), v in self.series.items() if typ == OK)
        duration = self.end_time / NS
        return {
            "valid": True,
            "duration_s": round(duration, 3),
            "ops": self._totals(),
            "latency": {
                "by_f": self._by_f("all"),
                "by_f_all": self._by_f_all(),
                "outside_faults": self._by_f("none"),
                "faults": faults,
            },
            "throughput": throughput,
            "ok_rate": round(ok_total / duration, 3) if duration > 0 else None,
            "availability": {
                "windows": windows_out,
                "longest_s": windows_out[0]["duration_s"] if windows_out else 0.0,
                "summary": windows_out[0]["summary"]
                if windows_out
                else "no unavailability"
                + (
                    f" ({self.client_errors} ops crashed in the client, not measured)"
                    if self.client_errors
                    else ""
                ),
            },
            "nemesis": self.nemesis,
            "nemesis_count": self.nemesis_count,
        }


class PerfChecker(StreamChecker):
    """Latency, throughput and availability (see the module docstring); always ``valid: true``.

    Options: ``top_windows`` (int, default 10): how many unavailability windows to list.
    Result: ``{"valid", "duration_s", "ops": {"count", "ok", "fail", "info", "fail_no_match",
    "fail_aborted", "fail_unsupported", "fail_unavailable", "client_errors"}, "latency": {"by_f",
    "by_f_all", "outside_faults", "faults"}, "throughput",
    "ok_rate", "availability": {"windows", "longest_s", "summary"}, "nemesis", "nemesis_count"}``.
    """

    name = "perf"

    def begin(self, test: dict[str, object], opts: dict[str, object]) -> Accumulator:
        top = opts.get("top_windows", TOP_WINDOWS)
        if not isinstance(top, int) or top < 1:
            raise ValueError(f"option top_windows must be a positive integer, got {top!r}")
        return _PerfAcc(top, nemesis_verbs(test), fault_names(test))
