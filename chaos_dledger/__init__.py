"""The glue between the chaos tool and the Python DLedger server: DLedger as a chaos plug-in.

Everything DLedger-specific the tool uses lives here and is registered through entry points
(``setup.cfg``): the DB (:mod:`chaos_dledger.db`, ``--db dledger``, the default DB), its clients
(:mod:`chaos_dledger.clients`), the deterministic simulator's command (``chaos sim``,
:mod:`chaos_dledger.sim`) and the bug catalogue (:mod:`chaos_dledger.mutants`). The generic tool
(``chaos/``) never imports it; the server (``dledger/``) never imports it or the tool.
"""

# the server's own code, whose coverage `chaos sim --coverage` measures (chaos.api.codecov): the DB
# declares it (DLedgerDB.source_packages, source_omit) and the simulator measures it, so it lives
# here, below both; the simulated world beside it (network and clock, disk) is the tool's
SOURCE_PACKAGES = ("dledger",)
SOURCE_OMIT = ("*/dledger/sim.py", "*/dledger/simdisk.py")
