"""Regenerate the catalogue's patch files (``chaos_dledger/mutants/*.patch``, package data) against the current tree.

Each mutant is a few exact text replacements in the ``dledger`` package; this script applies them
to a temporary copy and writes ``diff -u`` of the original and the copy, behind a header naming the
bug class, its source and the configurations that should expose it (read by
``chaos_dledger.mutants.load_mutants``). Run it after the server changed so the patches stay exact::

    python3 bench/mutants/make_patches.py            # rewrite every patch
    python3 bench/mutants/make_patches.py --check    # exit 1 if a replacement no longer applies

A replacement whose old text is not found exactly once is an error naming the mutant and file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "chaos_dledger" / "mutants"

# name -> header fields and (path, old, new) replacements. Header keys: bug (one line), source,
# real (configurations for real clusters, "workload nemesis [--option value ...]", ";"-separated),
# sim ("workload nemesis [--option value ...]" for ``chaos sim``, as bench/sim_power.py runs it,
# or empty), why (how it shows).
MUTANTS: dict[str, dict[str, object]] = {
    "ack-before-quorum": {
        "bug": "leader acknowledges before a quorum holds the entry (quorum index off by one)",
        "source": "Raft paper section 5.3 (commit once a majority stores the entry); DLedger QuorumAckChecker",
        "real": "log partition-random-halves; register partition-random-halves,kill-leader",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader",
        "why": "a leader cut off with one follower commits with 2 of 5 copies; the majority side's "
        "new leader overwrites acknowledged writes",
        "edits": [
            (
                "dledger/core/node.py",
                "        quorum = len(self.cfg.peers) // 2 + 1\n",
                "        quorum = len(self.cfg.peers) // 2\n",
            ),
            (
                "dledger/core/node.py",
                "        q = marks[len(self.cfg.peers) // 2]\n",
                "        q = marks[len(self.cfg.peers) // 2 - 1]\n",
            ),
        ],
    },
    "follower-ack-before-fsync": {
        "bug": "follower acknowledges appended entries before they are fsynced (no sync requested)",
        "source": "etcd#14143 and Jepsen's LazyFS reports (log not fsynced); DLedger acks never wait for disk",
        "real": "log lose-unfsynced; register lose-unfsynced",
        "sim": "log partition,kill,power-failure",
        "why": "the leader counts the followers' acks; losing every node's unsynced writes leaves the "
        "entry on a minority, and a follower elected without it truncates it",
        "edits": [
            (
                "dledger/core/node.py",
                "            self._accept(e)\n            self._need_sync = True\n",
                "            self._accept(e)\n",
            )
        ],
    },
    "vote-not-persisted": {
        "bug": "a granted vote is kept in memory only (not marked for persisting), so a restart forgets it",
        "source": "Raft paper Figure 2 (votedFor is persistent state); etcd PR #7317 (MustSync); PySyncObj#201",
        "real": "register kill; register kill-leader",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader",
        "why": "a node restarted inside a term votes twice in that term: two leaders in one term",
        "edits": [
            (
                "dledger/core/node.py",
                "        if self.vote_for != req.src:\n            self._set_vote(req.src)\n",
                "        if self.vote_for != req.src:\n            self.vote_for = req.src\n",
            )
        ],
    },
    "vote-without-log-check": {
        "bug": "vote granted without the candidate's log up-to-date check",
        "source": "Raft paper section 5.4.1 (election restriction); DLedger #52 (ledgerEndTerm from currTerm)",
        "real": "log partition-random-node,kill; register partition-random-halves,kill",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader",
        "why": "a member with a stale log wins and truncates committed entries (the follower guard "
        "logs it, or the final reads lose entries)",
        "edits": [
            (
                "dledger/core/node.py",
                "        if req.ledger_end_term < end_term:\n"
                "            return VoteResult.REJECT_EXPIRED_LEDGER_TERM, self.term\n"
                "        if req.ledger_end_term == end_term and req.ledger_end_index < end_index:\n"
                "            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX, self.term\n",
                "",
            )
        ],
    },
    "read-index-no-confirm": {
        "bug": "read-index read answered at once by the leader, without a heartbeat round confirming leadership",
        "source": "Raft thesis section 6.4 (read index needs a heartbeat round); DLedger 0.2 handleGet checks only isLeader",
        "real": "register partition-leader --read-mode read-index; register pause-leader --read-mode read-index",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader --read-mode read-index",
        "why": "a deposed leader that has not stepped down yet answers reads from its stale state",
        "edits": [
            (
                "dledger/core/node.py",
                "        if lease and now < self.lease_start + self.cfg.lease_ms - self.cfg.heartbeat_ms:\n",
                "        if not lease or now < self.lease_start + self.cfg.lease_ms - self.cfg.heartbeat_ms:\n",
            )
        ],
    },
    "lease-no-step-down": {
        "bug": "lease read trusts the role, and a leader whose lease ran out never steps down",
        "source": "etcd-io/raft ReadOnlyLeaseBased (relies on CheckQuorum step-down); DLedger elector lease",
        "real": "register partition-leader --read-mode lease; register clock-slow-leader --read-mode lease",
        "sim": "register partition,kill,partition-leader,pause-leader --read-mode lease",
        "why": "an isolated leader keeps serving lease reads while the majority elects a new leader and writes",
        "edits": [
            (
                "dledger/core/node.py",
                "        if lease and now < self.lease_start + self.cfg.lease_ms - self.cfg.heartbeat_ms:\n",
                "        if lease and self.lease_start >= 0:\n",
            ),
            (
                "dledger/core/node.py",
                "        elif now - self.last_succ_heartbeat > self.cfg.lease_ms:\n"
                "            log.info(\n"
                '                "%s: leader lease expired (no quorum of heartbeats for %d ms), stepping down at term %d",\n'
                "                self.id,\n"
                "                now - self.last_succ_heartbeat,\n"
                "                self.term,\n"
                "            )\n"
                "            self.change_to_candidate(self.term)\n"
                "            self.next_vote_time = now + self._vote_interval()\n",
                "",
            ),
        ],
    },
    "figure8-old-term-commit": {
        "bug": "an old-term entry committed by counting replicas (no current-term rule)",
        "source": "Raft paper section 5.4.2 and Figure 8; DLedger #4 (0.2.x QuorumAckChecker)",
        "real": "log partition-random-halves,kill-leader; register partition-random-halves,kill-leader",
        "sim": "register figure8 --time-limit 10",
        "why": "a leader of a later term commits a replica-counted old entry, crashes, and a member "
        "holding a different entry there wins and overwrites the committed one",
        "edits": [
            (
                "dledger/core/node.py",
                "        if q > commit and q >= self.begin_index and self.term_at(q) == self.term:\n",
                "        if q > commit and q >= self.begin_index:\n",
            )
        ],
    },
    "get-uncommitted": {
        "bug": "GET returns entries beyond the commitIndex (uncommitted entries)",
        "source": "DLedger 0.2.x DLedgerServer.handleGet (any local entry); Jepsen set-full (reads during the run)",
        "real": "log partition-random-halves; log partition-leader",
        "sim": "log partition,kill,power-failure",
        "why": "a reader sees an entry of a cut-off leader that is later truncated: seen, then lost",
        "edits": [
            (
                "dledger/driver.py",
                "        if index > self.core.commit_index:\n            return Code.INDEX_OUT_OF_RANGE, None\n",
                "        if index > self.core.end_index:\n            return Code.INDEX_OUT_OF_RANGE, None\n",
            )
        ],
    },
    "follower-commit-unbounded": {
        "bug": "follower takes the leader's commitIndex without bounding it by the entries it verified",
        "source": "Raft paper Figure 2 (commitIndex = min(leaderCommit, index of last new entry)); DLedger #316",
        "real": "log partition-random-halves,kill-leader; register partition-random-halves,kill",
        "sim": "log partition,kill,power-failure",
        "why": "a follower applies and serves its own divergent suffix as committed",
        "edits": [
            (
                "dledger/core/node.py",
                "                new_commit = min(req.commit_index, self.verified_index, self.end_index)\n",
                "                new_commit = req.commit_index\n",
            )
        ],
    },
    "leader-local-kv-read": {
        "bug": "raft-log KV get answered from the leader's state machine instead of through the log",
        "source": "aphyr.com/posts/316 (etcd and Consul stale reads); DLedger 0.2 handleGet checks isLeader",
        "real": "register partition-leader; register pause-leader",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader",
        "why": "a deposed leader that still believes it leads answers reads from stale state",
        "edits": [
            (
                "dledger/driver.py",
                '        if mode == "unsafe":\n',
                '        if mode == "unsafe" or (mode == "raft-log" and self.core.role == Role.LEADER):\n',
            )
        ],
    },
    "txn-reads-before-commit": {
        "bug": "a transaction's reads are evaluated on the leader's state when it arrives and its writes "
        "applied when its entry commits: two steps, not one",
        "source": "Adya's G-single and G2-item (read skew, lost update); Jepsen's list-append "
        "(jepsen.tests.cycle.append) against stores that read outside the commit",
        "real": "list-append partition-ring,kill-leader",
        "sim": "list-append partition,kill",
        "why": "two concurrent transactions read a key before either commits and both append to it: "
        "each misses the other's append (an rw edge both ways with a ww edge), a cycle Elle names",
        "edits": [
            (
                "dledger/driver.py",
                '        if not is_read_only(mops) or mode == "raft-log":\n'
                "            return self.propose(encode_txn(mops), waiter, now)\n",
                '        if not is_read_only(mops) or mode == "raft-log":\n'
                "            if self.core.role == Role.LEADER:  # the reads now, the writes through the log\n"
                "                waiter.reads = self.sm.read_txn(mops)  # type: ignore[attr-defined]\n"
                "            return self.propose(encode_txn(mops), waiter, now)\n",
            ),
            (
                "dledger/driver.py",
                "                        self.host.answer(w, Code.SUCCESS, index=e.index, value=res)\n"
                "                    else:\n",
                "                        self.host.answer(\n"
                '                            w, Code.SUCCESS, index=e.index, value=getattr(w, "reads", None) or res\n'
                "                        )\n"
                "                    else:\n",
            ),
        ],
    },
    # classes from the field (issue 23): each needs one of the simulator's harder faults
    "stale-vote-response": {
        "bug": "a candidate counts vote responses of an earlier round (an earlier term) toward its election",
        "source": "Raft paper section 5.2 (one vote per term); etcd-raft Step drops lower-term messages; "
        "hashicorp/raft and Jepsen reports of stale RequestVote responses",
        "real": "register partition-random-halves,kill --nemesis-interval 2",
        "sim": "register slow-network,partition,kill",
        "why": "a vote granted for term t, delivered late, elects the candidate in term t+1 beside the "
        "member that term's voters chose: two leaders in one term",
        "edits": [
            (
                "dledger/core/node.py",
                "        if self._votes is None or resp.round != self._vote_round or self.role != _CANDIDATE:\n"
                "            return\n"
                "        if resp.result == VoteResult.ACCEPT and resp.term != self._vote_term:\n"
                "            return  # a grant in another term: round numbers start again at a restart, terms do not\n",
                "        if self._votes is None or self.role != _CANDIDATE:\n            return\n",
            )
        ],
    },
    "stale-term-push": {
        "bug": "a follower accepts heartbeats and pushes of a leader of an older term",
        "source": "Raft paper Figure 2 (AppendEntries: reply false if term < currentTerm); DLedger "
        "handleHeartBeat/EntryHandler term checks",
        "real": "log partition-random-halves,kill-leader; register partition-leader",
        "sim": "log slow-network,partition-leader,kill-leader",
        "why": "a message of a deposed leader, delayed across an election, makes a member follow it in "
        "the new term and take its entries",
        "edits": [
            (
                "dledger/core/node.py",
                "        if msg.term < self.term:\n            return _EXPIRED_TERM\n        if msg.term > self.term:\n",
                "        if msg.term > self.term:\n",
            )
        ],
    },
    "leader-acks-before-own-fsync": {
        "bug": "the leader counts its own copy toward the quorum before its fsync completed",
        "source": "Raft thesis section 10.2.1 (the leader may write in parallel but counts itself once "
        "durable); etcd-raft MustSync and the Ready contract",
        "real": "log lose-unfsynced --nemesis-opt lose_unfsynced_targets=leader",
        "sim": "log power-in-sync,kill-in-sync,partition",
        "why": "an entry acknowledged by the leader and a bare minority of followers is lost when power "
        "fails with the leader's fsync in flight and the others elect a leader without it",
        "edits": [
            (
                "dledger/core/node.py",
                "        above = 1 if self.durable_index > commit else 0\n",
                "        above = 1 if self.end_index > commit else 0\n",
            ),
            (
                "dledger/core/node.py",
                "        marks = sorted([self.durable_index] + [p.match for p in self._progress.values()], reverse=True)\n",
                "        marks = sorted([self.end_index] + [p.match for p in self._progress.values()], reverse=True)\n",
            ),
        ],
    },
    "repair-votes-while-damaged": {
        "bug": "a member whose committed prefix was damaged and cut votes before it fetched it again",
        "source": "Protocol-Aware Recovery (Alagappan et al., FAST 2018): a corrupted log must not "
        "take part in elections; TigerBeetle's repair before view change",
        "real": "log bitflip --nemesis-opt file_targets=minority",
        "sim": "log storage,partition,kill",
        "why": "the damaged member's shorter log lets a candidate without the committed entries win: "
        "acknowledged entries are lost",
        "edits": [
            (
                "dledger/core/node.py",
                "        if self.repair_to >= 0 and not self._repaired():\n"
                "            return VoteResult.UNKNOWN, self.term  # a damaged committed prefix never votes\n",
                "",
            )
        ],
    },
    # issue 33: the features the default swarm now reaches (snapshots, compaction, restart, transfer)
    "snapshot-install-off-by-one": {
        "bug": "after INSTALL_SNAPSHOT the follower resumes applying at lastIncludedIndex + 2 (the entry "
        "right after the snapshot never reaches its state machine)",
        "source": "Raft paper section 7 (the snapshot replaces entries up to lastIncludedIndex); DLedger "
        "master's InstallSnapshot / StateMachineCaller",
        "real": "register kill,partition --server-arg=--snapshot-every=20 --server-arg=--data-file-size=16384",
        "sim": "register kill,partition,leader-transfer --read-mode read-index",
        "why": "the member that installed the snapshot misses one write; once it leads (or its own "
        "snapshot is installed elsewhere) reads see the older value",
        "edits": [
            (
                "dledger/driver.py",
                "            self.sm.on_snapshot_load(data)\n            self.last_applied = s_index\n",
                "            self.sm.on_snapshot_load(data)\n            self.last_applied = s_index + 1\n",
            )
        ],
    },
    "replay-after-restart": {
        "bug": "a restart replays the log from its first entry on top of the loaded snapshot (entries "
        "the snapshot covers are applied twice)",
        "source": "DLedger master's SnapshotManager.loadSnapshot then StateMachineCaller (replay from "
        "lastIncludedIndex + 1); Raft paper section 7",
        "real": "list-append kill --server-arg=--snapshot-every=20 --server-arg=--data-file-size=16384",
        "sim": "list-append kill,leader-transfer",
        "why": "a restarted member's state holds appends twice; once it leads, reads show duplicated "
        "list elements",
        "edits": [
            (
                "dledger/driver.py",
                "    applied = replay(node, store, sm, applied, min(committed, store.end_index))\n",
                "    applied = replay(node, store, sm, store.begin_index - 1, min(committed, store.end_index))\n",
            )
        ],
    },
    "compaction-racing-lagging-follower": {
        "bug": "once a snapshot is durable the log is compacted up to the commitIndex of that moment, "
        "not up to the snapshot's index (entries committed while it was saved go uncovered)",
        "source": "Raft paper section 7 (discard only entries the snapshot covers); DLedger master's "
        "SnapshotManager (deleteExpiredSnapshot, ledger truncatePrefix at lastIncludedIndex)",
        "real": "register kill,partition-ring --server-arg=--snapshot-every=20 --server-arg=--data-file-size=16384",
        "sim": "register kill,partition",
        "why": "a follower lagging behind the compaction point gets neither the entries nor a snapshot "
        "covering them, and a restarted member cannot rebuild its state (log begins after its snapshot)",
        "edits": [
            (
                "dledger/driver.py",
                "            begin = store.compact_prefix(index)\n",
                "            begin = store.compact_prefix(self.core.commit_index)\n",
            )
        ],
    },
    "heartbeat-stale-round": {
        "bug": "the leader counts heartbeat answers of an earlier round to confirm reads and extend its lease",
        "source": "Raft thesis section 6.4 (read index: a fresh heartbeat round); etcd-raft read_only.go "
        "matches acks to the request context",
        "real": "register partition-leader --read-mode read-index; register pause-leader --read-mode lease",
        "sim": "register slow-network,partition-leader,pause-leader --read-mode read-index",
        "why": "late answers from before a partition confirm a deposed leader's read index: stale reads",
        "edits": [
            (
                "dledger/core/node.py",
                "        if self.role != _LEADER or not self._hb_open or resp.round != self._hb_round:\n"
                "            return\n"
                "        if resp.code == _SUCCESS and resp.term != self.term:\n"
                "            return  # a leader of another term acknowledged (rounds start again at a restart)\n",
                "        if self.role != _LEADER or not self._hb_open:\n            return\n",
            )
        ],
    },
    "deleted-keys-returning": {
        "bug": "the leader applies a KV delete to its own state machine at once and answers, without "
        "appending it to the log (a delete orders against nothing, the author thought)",
        "source": "Raft paper section 8 (every command through the log); Cassandra's resurrected deletes "
        "(a tombstone some replicas never saw: deleted data returns)",
        "real": "register partition-leader; register kill-leader",
        "sim": "register partition,kill,partition-leader,pause-leader,clock-slow-leader",
        "why": "the followers keep the key, and so does the leader's log: after a leader change, a "
        "restart's replay or from a follower's local read the deleted value is read again",
        "edits": [
            (
                "dledger/driver.py",
                "            return Code.LEADER_PENDING_FULL\n        code, entry = self.core.propose(body, now)\n",
                "            return Code.LEADER_PENDING_FULL\n"
                "        from dledger.statemachine import decode_kv\n\n"
                "        cmd = decode_kv(body)\n"
                '        if cmd is not None and cmd[0] == "delete" and self.core.role == Role.LEADER:\n'
                "            self.sm.apply_command(cmd)  # type: ignore[attr-defined]\n"
                "            self.host.answer(waiter, Code.SUCCESS, result=True)\n"
                "            return Code.SUCCESS\n"
                "        code, entry = self.core.propose(body, now)\n",
            )
        ],
    },
    # issue 39's classes, one per Jepsen workload that catches it
    "transfer-applied-half-way": {
        "bug": "a transaction micro-op that fails (an add that would go below zero) is skipped and the "
        "others commit, though the transaction is answered as aborted",
        "source": "Jepsen's bank test (jepsen.tests.bank: reads must sum to the total); Redis MULTI/EXEC "
        "(a command that errs at EXEC does not roll back the others)",
        "real": "bank partition-ring,kill-leader",
        "sim": "bank partition,kill",
        "why": "a transfer the source account cannot cover still credits the target: reads sum to more "
        "than the total (wrong-total)",
        "edits": [
            (
                "dledger/statemachine.py",
                "        out: list[list[Any]] = []\n        for f, key, value in mops:\n",
                "        out: list[list[Any]] = []\n        aborted = None\n        for f, key, value in mops:\n",
            ),
            (
                "dledger/statemachine.py",
                "                if isinstance(new, TxnAborted):\n                    return new\n",
                "                if isinstance(new, TxnAborted):\n                    aborted = new\n                    continue\n",
            ),
            (
                "dledger/statemachine.py",
                "                self.data[key] = value\n        return out\n",
                "                self.data[key] = value\n        return aborted if aborted is not None else out\n",
            ),
        ],
    },
    "increment-applied-twice": {
        "bug": "a snapshot is labelled with the index before the last entry its state holds (taken "
        "after that entry applied), so a restart or INSTALL_SNAPSHOT applies that entry again",
        "source": "Raft paper section 7 (lastIncludedIndex: the last entry the snapshot's state "
        "reflects); Jepsen's counter test (jepsen.checker/counter: reads above the attempted adds)",
        "real": "counter kill,partition-ring --server-arg=--snapshot-every=20 --server-arg=--data-file-size=16384",
        "sim": "counter kill,leader-transfer",
        "why": "a member restarted from its snapshot, or given it by the leader, counts that entry's "
        "add twice; once it leads, reads exceed every add attempted",
        "edits": [
            (
                "dledger/driver.py",
                "        index = self.last_applied\n        term = self.store.term_at(index)\n",
                "        index = self.last_applied - 1\n        term = self.store.term_at(index)\n",
            )
        ],
    },
    "add-lost-on-leader-change": {
        "bug": "a transaction of writes only (sadd, append, w: nothing to abort) is acknowledged once "
        "the leader appended it, before it commits",
        "source": "Raft paper section 5.3 (answer once the entry is committed and applied); Jepsen's "
        "set-full (jepsen.checker/set-full: lost elements), e.g. the MongoDB and Redis-Raft reports",
        "real": "set partition-leader,kill-leader; set partition-ring",
        "sim": "set partition,kill,partition-leader",
        "why": "a leader cut off with an acknowledged add is replaced; the new leader's log lacks it and "
        "every later read misses the element (lost)",
        "edits": [
            (
                "dledger/driver.py",
                '        if not is_read_only(mops) or mode == "raft-log":\n'
                "            return self.propose(encode_txn(mops), waiter, now)\n",
                '        if not is_read_only(mops) or mode == "raft-log":\n'
                "            code = self.propose(encode_txn(mops), waiter, now)\n"
                '            if code == Code.SUCCESS and all(m[0] in ("sadd", "append", "w") for m in mops):\n'
                "                # nothing in it can abort: acknowledged once in the leader's log\n"
                "                self.waiters = {i: w for i, w in self.waiters.items() if w is not waiter}\n"
                "                self.host.answer(waiter, Code.SUCCESS, value=mops)\n"
                "            return code\n",
            )
        ],
    },
    "transfer-without-catch-up": {
        "bug": "a leadership-transfer campaign (TimeoutNow) starts before the transferee caught up, and "
        "voters grant a campaign marked as a transfer without the log up-to-date check",
        "source": "Raft thesis section 3.10 (the leader sends TimeoutNow once the target's log matches "
        "its own) and Raft paper section 5.4.1 (election restriction); etcd-raft's campaignTransfer "
        "(a transfer may bypass the leader lease, never the log check); DLedger #85 (a lagging "
        "transferee)",
        "real": "register leader-transfer,kill --nemesis-opt transfer_targets=behind",
        "sim": "register leader-transfer,kill,partition",
        "why": "the transferee furthest behind wins the next term without entries the old leader "
        "committed and overwrites them on the others (the simulator's leader completeness check; "
        "acknowledged writes lost)",
        "edits": [
            (
                "dledger/protocol.py",
                "    ledger_end_term: int = -1\n    round: int = 0\n",
                "    ledger_end_term: int = -1\n    round: int = 0\n    transfer: int = 0\n",
            ),
            (
                "dledger/protocol.py",
                '    "take_leadership_index": (-1, MAX_INDEX),\n',
                '    "take_leadership_index": (-1, MAX_INDEX),\n    "transfer": (0, 1),\n',
            ),
            (
                "dledger/core/node.py",
                "        # log checks before term checks: a stale node's big term is never adopted\n"
                "        if req.ledger_end_term < end_term:\n"
                "            return VoteResult.REJECT_EXPIRED_LEDGER_TERM, self.term\n"
                "        if req.ledger_end_term == end_term and req.ledger_end_index < end_index:\n"
                "            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX, self.term\n",
                "        # log checks before term checks: a stale node's big term is never adopted; a\n"
                "        # transfer campaign was chosen by the leader, whose log was complete\n"
                "        if req.ledger_end_term < end_term and not req.transfer:\n"
                "            return VoteResult.REJECT_EXPIRED_LEDGER_TERM, self.term\n"
                "        if req.ledger_end_term == end_term and req.ledger_end_index < end_index and not req.transfer:\n"
                "            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX, self.term\n",
            ),
            (
                "dledger/core/node.py",
                "            round=self._vote_round,\n        )\n        res, t = self.handle_vote(req)\n",
                "            round=self._vote_round,\n"
                "            transfer=int(self.term_to_take_leadership != -1),\n"
                "        )\n        res, t = self.handle_vote(req)\n",
            ),
            (
                "dledger/core/node.py",
                "                    round=self._vote_round,\n                )\n            )\n",
                "                    round=self._vote_round,\n"
                "                    transfer=int(self.term_to_take_leadership != -1),\n"
                "                )\n            )\n",
            ),
            (
                "dledger/core/node.py",
                "        elif self.end_index >= index:\n",
                "        elif True:  # the leader vouched for this member: campaign at once\n",
            ),
        ],
    },
}


def build(name: str, spec: dict[str, object], root: Path = ROOT) -> str:
    """The patch text of mutant ``name`` (header + ``diff -u``) against ``root``'s dledger package."""
    edits = spec["edits"]
    assert isinstance(edits, list)
    with tempfile.TemporaryDirectory(prefix="mutant-gen-") as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        for rel in sorted({e[0] for e in edits}):
            for d in (a, b):
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, d / rel)
        for rel, old, new in edits:
            text = (b / rel).read_text()
            count = text.count(old)
            if count != 1:
                raise SystemExit(f"mutant {name}: {rel}: expected the old text once, found it {count} times")
            (b / rel).write_text(text.replace(old, new))
        header = [f"# class: {name}"]
        for key in ("bug", "source", "real", "sim", "why"):
            header.append(f"# {key}: {spec[key]}")
        diffs = []
        for rel in sorted({e[0] for e in edits}):
            out = subprocess.run(
                ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", f"a/{rel}", f"b/{rel}"],
                cwd=tmp,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 1:
                raise SystemExit(f"mutant {name}: diff failed on {rel}: {out.stderr.strip()}")
            diffs.append(out.stdout)
        return "\n".join(header) + "\n" + "".join(diffs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that every mutant still applies")
    ap.add_argument("--only", action="append", default=[], help="write this mutant's patch only (repeatable)")
    args = ap.parse_args()
    for name, spec in MUTANTS.items():
        if args.only and name not in args.only:
            continue
        text = build(name, spec)
        if not args.check:
            (OUT / f"{name}.patch").write_text(text)
            print(f"wrote {(OUT / f'{name}.patch').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
