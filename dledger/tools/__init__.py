"""Operator tools run by hand on a stopped member's files (``dledger inspect``), not by the server.

They are not part of the server's runtime (nothing under :mod:`dledger.core`, :mod:`dledger.driver`,
:mod:`dledger.store` or :mod:`dledger.server` imports them), so a campaign's coverage of the
server's packages does not count them (docs/design.md, "What the default simulation does not
reach")."""
