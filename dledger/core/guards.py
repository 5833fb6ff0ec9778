"""The wording of the follower's safety-guard log lines (DLedger's EntryHandler defence in depth).

Each guard refuses a push that would change the committed prefix; seeing one in a server log means a
leader without every committed entry was elected, or a committed entry changed. The ``safety-guard``
log pattern of ``chaos/cluster/dledger_db.py`` matches these lines in the servers' logs, so their
wording is a contract with the chaos tool: change both together. Each is a ``%``-format for
``logging`` whose first argument is the member id.
"""

from __future__ import annotations

# (member, commitIndex, the TRUNCATE's index)
CUT_BELOW_COMMIT = "%s: refusing to truncate below commitIndex %d (at %d)"
# (member, the TRUNCATE's index, commitIndex)
OVERWRITE_COMMITTED = "%s: refusing to overwrite committed entry %d (commitIndex %d)"
# (member, index)
COMMITTED_ENTRY_DIFFERS = "%s: leader's entry %d differs from the committed one"
# (member, snapshot's lastIncludedIndex, commitIndex)
SNAPSHOT_BELOW_COMMIT = "%s: snapshot at %d is below commitIndex %d"

ALL = (CUT_BELOW_COMMIT, OVERWRITE_COMMITTED, COMMITTED_ENTRY_DIFFERS, SNAPSHOT_BELOW_COMMIT)
