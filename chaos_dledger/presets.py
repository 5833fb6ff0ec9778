"""DLedger's ``chaos gate`` presets: the real-cluster runs a bare ``chaos gate`` starts for the
bundled server (``DLedgerDB.gate_presets``, read by :func:`chaos.control.db.gate_presets`).

``power``, the default, holds the configurations that caught the bug catalogue's classes on real
clusters (``bench/catalogue.md``: runs to detection per class; ``bench/catalogue.py --preset``),
with DLedger's own options (its read modes, snapshot and segment sizes as server flags) given as
``chaos run`` long options; ``catches`` names the catalogue's mutants
(``chaos_dledger/mutants/*.patch``) each configuration caught. ``elections`` is the gate's matrix
before the catalogue: register and log under elections. Jepsen's habit of a fixed matrix of
workload x nemesis packages.
"""

from __future__ import annotations

from chaos.api import GateRun

# 30 s of faults per run on 5 nodes (named: a docker cluster keeps the size of its last run); each
# run, with setup, healing and checking, took 34-60 s on this machine (README, release gate)
_SHORT = ("--time-limit", "30", "--node-count", "5")
# Sticky readers at the leader and writers on the same keys from both sides of the cut (issue 13):
# 3 threads per node, 100 ops/s.
_READS = ("--concurrency", "3n", "--rate", "100")
# snapshots every 20 applied entries and 16 KiB log segments (issue 33): compaction runs every few
# seconds, so a member that was down or cut off falls behind the compacted prefix and needs the
# leader's snapshot, and a restart loads a snapshot and replays the log after it
_SNAPSHOTS = ("--server-arg=--snapshot-every=20", "--server-arg=--data-file-size=16384")

PRESETS: dict[str, tuple[GateRun, ...]] = {
    # Chosen for bug-finding power (bench/catalogue.md: runs to detection per class).
    "power": (
        GateRun(
            "log",
            "partition-random-halves",
            (*_SHORT, "--nemesis-interval", "5", "--rate", "100"),
            ("get-uncommitted", "ack-before-quorum"),
        ),
        GateRun(
            "log",
            "partition-random-halves+kill-leader",
            _SHORT,
            ("follower-commit-unbounded",),
        ),
        GateRun(
            "log",
            "lose-unfsynced",
            (
                *_SHORT,
                "--nemesis-opt",
                "lose_unfsynced_targets=majority-followers",
                "--nemesis-interval",
                "8",
            ),
            ("follower-ack-before-fsync",),
        ),
        GateRun(
            "register",
            "partition-leader",
            (*_SHORT, *_READS, "--read-mode", "lease"),
            ("lease-no-step-down",),
        ),
        GateRun(
            "register",
            "clock-slow-leader",
            (*_SHORT, *_READS, "--read-mode", "read-index"),
            ("read-index-no-confirm",),
        ),
        GateRun(
            "register",
            "clock-slow-leader",
            (*_SHORT, *_READS, "--read-mode", "raft-log"),
            ("leader-local-kv-read",),
        ),
        # storage faults on a minority: the correct server repairs them (issue 23)
        GateRun("log", "bitflip", (*_SHORT, "--nemesis-opt", "file_targets=minority")),
        # late, not lost: the leader's packets held 100-700 ms (past the 300 ms follower timeout), so
        # elections happen while its old-term messages are still arriving (issue 23)
        GateRun(
            "log",
            "packet-delay",
            (
                *_SHORT,
                *("--nemesis-opt", "packet_targets=leader"),
                *("--nemesis-opt", "packet_delay_ms=400", "--nemesis-opt", "packet_delay_jitter_ms=300"),
                *("--nemesis-interval", "8"),
            ),
        ),
        # a crash that loses unfsynced writes on the leader itself, or on every member at once
        GateRun(
            "log",
            "lose-unfsynced",
            (*_SHORT, "--nemesis-opt", "lose_unfsynced_targets=leader,all", "--nemesis-interval", "5"),
        ),
        # snapshots and compaction under kills and partitions (issue 33): snapshot install to a
        # member behind the compacted prefix, restart from a snapshot, replay after it
        GateRun("list-append", "kill+partition-ring", (*_SHORT, *_SNAPSHOTS)),
        GateRun("register", "kill+partition-ring", (*_SHORT, *_SNAPSHOTS)),
        # leadership handed to the member furthest behind (one just restarted), which the leader
        # must catch up first, with snapshots so that may take an install (issue 33); without a
        # partition, which left every transfer timing out in half the runs (the faults checker's
        # unknown: nothing was transferred), and with random targets drawn too, so transfers apply
        GateRun(
            "register",
            "leader-transfer+kill",
            (
                *_SHORT,
                *_SNAPSHOTS,
                "--nemesis-opt",
                "transfer_targets=random,behind",
                "--nemesis-interval",
                "3",
            ),
        ),
    ),
    # The gate's matrix before the catalogue: register and log under elections, runs of 60 s.
    "elections": tuple(
        GateRun(w, n) for w in ("register", "log") for n in ("partition-ring+kill-leader", "kill")
    ),
}

DEFAULT_PRESET = next(iter(PRESETS))
"""The preset a bare ``chaos gate`` runs (the first: ``power``)."""
