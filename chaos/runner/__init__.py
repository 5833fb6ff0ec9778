"""Running a test (Jepsen's ``jepsen.core``): the ``chaos run`` command (:mod:`chaos.runner.cli`),
the :class:`~chaos.runner.runner.Runner` composing DB, workload, nemesis and checkers in phases,
the live view and the leadership observer. The top layer below ``chaos.cli``."""
