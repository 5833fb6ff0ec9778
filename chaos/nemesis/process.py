"""Process faults on the DB server: kill, pause ("hammer time"), restart.

Follows ``jepsen.nemesis.combined/db-package``: ``start-kill`` SIGKILLs the server on the chosen
nodes through ``DLedgerDB.kill`` and ``stop-kill`` starts them again (``DLedgerDB.start``);
``start-pause`` / ``stop-pause`` send SIGSTOP / SIGCONT through ``DLedgerDB.pause`` / ``resume``;
``start-restart`` stops the server cleanly (SIGTERM, wait for exit) and starts it again.

Invocation values are node specs (``"one"``, ``"minority"``, ``"leader"``, ``"all"``... see
:data:`chaos.nemesis.base.TARGETS`) or explicit node lists; completions are
``{"nodes": [...], "targets": spec}`` (``nodes`` empty when e.g. there was no leader).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.history.op import Op
from chaos.nemesis.base import TARGETS, NemesisError, NoState, choose_nodes, complete, on_nodes, sh


def _check_targets(targets: Sequence[str], kind: str) -> list[str]:
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise ValueError(f"{kind} targets {list(targets)!r}: expected some of {', '.join(TARGETS)}")
    return list(targets)


class KillNemesis:
    """``start-kill`` (SIGKILL on the chosen nodes) / ``stop-kill`` (start every node this nemesis
    killed). ``heal`` starts them too. Completion of stop: ``{"nodes": [restarted]}``."""

    kind = "kill"

    def __init__(self, targets: Sequence[str] = ("one", "minority", "all")) -> None:
        self.targets = _check_targets(targets, "kill")
        self.down: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-kill", "stop-kill"}

    def setup(self, test: Any) -> None:
        pass

    def teardown(self, test: Any) -> None:
        self.heal(test)

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "start-kill":
            spec = op.value if op.value is not None else test.rng.choice(self.targets)
            nodes = choose_nodes(test, spec)
            on_nodes(test, test.db.kill, nodes)
            self.down |= set(nodes)
            return complete(op, {"targets": spec, "nodes": nodes})
        if op.f == "stop-kill":
            return complete(op, {"nodes": self._restart(test)})
        raise ValueError(f"kill nemesis: unexpected f {op.f!r}")

    def _restart(self, test: Any) -> list[str]:
        nodes = sorted(self.down)
        if nodes:
            on_nodes(test, test.db.start, nodes)
        self.down.clear()
        return nodes

    def heal(self, test: Any) -> None:
        self._restart(test)


class PauseNemesis:
    """``start-pause`` (SIGSTOP) / ``stop-pause`` (SIGCONT every node). ``heal`` resumes all nodes,
    so a process this nemesis paused never stays stopped."""

    kind = "pause"

    def __init__(self, targets: Sequence[str] = ("one", "minority", "all")) -> None:
        self.targets = _check_targets(targets, "pause")
        self.paused: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-pause", "stop-pause"}

    def setup(self, test: Any) -> None:
        pass

    def teardown(self, test: Any) -> None:
        self.heal(test)

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "start-pause":
            spec = op.value if op.value is not None else test.rng.choice(self.targets)
            nodes = choose_nodes(test, spec)

            def one(remote: Any) -> str | None:
                try:
                    test.db.pause(remote)
                    return None
                except Exception as e:  # e.g. killed by another nemesis: nothing to pause
                    return str(e)

            errors = {n: e for n, e in on_nodes(test, one, nodes).items() if e}
            paused = [n for n in nodes if n not in errors]
            self.paused |= set(paused)
            value: dict[str, Any] = {"targets": spec, "nodes": paused}
            if errors:
                value["not_running"] = errors
            return complete(op, value)
        if op.f == "stop-pause":
            nodes = sorted(self.paused)
            self.heal(test)
            return complete(op, {"nodes": nodes})
        raise ValueError(f"pause nemesis: unexpected f {op.f!r}")

    def heal(self, test: Any) -> None:
        on_nodes(test, test.db.resume)
        self.paused.clear()


def terminate_script(pidfile: str, wait_s: float = 10.0) -> str:
    """Shell: SIGTERM the pid in ``pidfile`` (SIGCONT first, a stopped process cannot exit), wait up
    to ``wait_s`` for it to exit, then SIGKILL. Prints ``clean`` or ``forced`` or ``absent``."""
    steps = int(wait_s * 10)
    return (
        f"p=$(cat {pidfile} 2>/dev/null); "
        'if [ -z "$p" ] || ! kill -0 "$p" 2>/dev/null; then echo absent; exit 0; fi; '
        'kill -CONT "$p"; kill -TERM "$p"; '
        f'i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt {steps} ]; do sleep 0.1; i=$((i+1)); done; '
        'if kill -0 "$p" 2>/dev/null; then kill -KILL "$p"; echo forced; else echo clean; fi'
    )


class RestartNemesis(NoState):
    """``start-restart``: clean stop (SIGTERM) and start on the chosen nodes; completion
    ``{"nodes": [...], "stopped": {node: "clean"|"forced"|"absent"}}``. ``stop-restart`` does nothing
    (the fault is instantaneous) and completes with ``{}``."""

    kind = "restart"

    def __init__(self, targets: Sequence[str] = ("one", "minority", "all")) -> None:
        self.targets = _check_targets(targets, "restart")

    def fs(self) -> set[str]:
        return {"start-restart", "stop-restart"}

    def invoke(self, test: Any, op: Op) -> Op:
        if op.f == "stop-restart":
            return complete(op, {})
        if op.f != "start-restart":
            raise ValueError(f"restart nemesis: unexpected f {op.f!r}")
        spec = op.value if op.value is not None else test.rng.choice(self.targets)
        nodes = choose_nodes(test, spec)

        def one(remote: Any) -> str:
            res = sh(remote, terminate_script(test.db.pidfile), check=False)
            if res.exit_code != 0:
                raise NemesisError(f"restart on {remote.node.name}: stop failed: {res.stderr.strip()}")
            test.db.start(remote)
            return str(res.stdout.strip())

        stopped = on_nodes(test, one, nodes)
        return complete(op, {"targets": spec, "nodes": nodes, "stopped": stopped})
