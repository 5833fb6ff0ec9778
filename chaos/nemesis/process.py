"""Process faults on the DB server: kill, pause ("hammer time"), restart.

Follows ``jepsen.nemesis.combined/db-package``: ``start-kill`` SIGKILLs the server on the chosen
nodes through the DB's ``kill`` and ``stop-kill`` starts them again (``start``; the ``process``
capability, :class:`chaos.cluster.db.Process`); ``start-pause`` / ``stop-pause`` send SIGSTOP /
SIGCONT through the DB's ``pause`` / ``resume`` (the ``pause`` capability); ``start-restart`` stops
the server cleanly (SIGTERM to the pid in the DB's ``pidfile``, wait for exit; a DB without a
pidfile is killed instead, recorded ``forced``) and starts it again.

Invocation values are node specs (``"one"``, ``"minority"``, ``"leader"``, ``"all"``... see
:data:`chaos.nemesis.base.TARGETS`) or explicit node lists; completions are
``{"nodes": [...], "targets": spec, "applied": bool, "why": str}`` (``nodes`` empty when e.g. there
was no leader). A start is ``applied`` when the fault reached at least one server: a kill that found
no running server (already down, or a pidfile that names no process), a pause of a stopped server,
a restart whose start failed are not; ``why`` says so per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.cluster.db import kill_all, pause_all, resume_all, running_all, running_any, start_all
from chaos.history.op import Op
from chaos.nemesis.base import (
    TARGETS,
    NoState,
    choose_nodes,
    complete,
    log,
    not_applied,
    on_nodes,
    outcome,
    sh,
)


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
        """``start-kill`` completes with ``killed`` (servers that ran before and not after) and, per
        other node, ``not_killed: {node: why}``; ``stop-kill`` with ``nodes`` (restarted) and
        ``not_started: {node: why}`` (those stay down and are started again by ``heal``)."""
        if op.f == "start-kill":
            spec = op.value if op.value is not None else test.rng.choice(self.targets)
            nodes = choose_nodes(test, spec)
            if not nodes:
                return not_applied(op, f"no node matched target {spec!r}", targets=spec, nodes=[])
            running = getattr(test.db, "running", None)

            def one(remote: Any) -> str | None:
                was = running_any(test.db, remote)
                kill_all(test.db, remote)
                if not was:
                    return "no server running (nothing to kill)"
                if running and running_any(test.db, remote):
                    return "server still running after SIGKILL"
                return None

            why = {n: w for n, w in on_nodes(test, one, nodes).items() if w}
            self.down |= set(nodes)
            killed = [n for n in nodes if n not in why]
            value: dict[str, Any] = {"targets": spec, "nodes": nodes, "killed": killed}
            if why:
                value["not_killed"] = why
            return complete(op, outcome(value, bool(killed), _why(why)))
        if op.f == "stop-kill":
            started, failed = self._restart(test)
            value = {"nodes": started}
            if failed:
                value["not_started"] = failed
            return complete(op, outcome(value, not failed, _why(failed)))
        raise ValueError(f"kill nemesis: unexpected f {op.f!r}")

    def _restart(self, test: Any) -> tuple[list[str], dict[str, str]]:
        """Start every node this nemesis killed: ``(started, {node: why not})``; the failed ones
        stay in ``down``."""
        nodes = sorted(self.down)
        failed = (
            {n: w for n, w in on_nodes(test, lambda r: _start(test, r), nodes).items() if w} if nodes else {}
        )
        self.down = set(failed)
        return [n for n in nodes if n not in failed], failed

    def heal(self, test: Any) -> None:
        _, failed = self._restart(test)
        if failed:  # the recovery wait and the liveness checker judge a node that stays down
            log.warning("kill nemesis: could not start %s", _why(failed))


def _start(test: Any, remote: Any) -> str | None:
    """Start the server on ``remote``; None when it runs afterwards, else why not."""
    try:
        start_all(test.db, remote)
    except Exception as e:
        return f"start failed: {e}"
    if not running_all(test.db, remote):
        return "server not running after start"
    return None


def _why(reasons: dict[str, str]) -> str:
    """``{node: why}`` as one sentence: ``"n1: why; n2: why"``."""
    return "; ".join(f"{n}: {w}" for n, w in sorted(reasons.items()))


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
                    pause_all(test.db, remote)
                    return None
                except Exception as e:  # e.g. killed by another nemesis: nothing to pause
                    return str(e)

            if not nodes:
                return not_applied(op, f"no node matched target {spec!r}", targets=spec, nodes=[])
            errors = {n: e for n, e in on_nodes(test, one, nodes).items() if e}
            paused = [n for n in nodes if n not in errors]
            self.paused |= set(paused)
            value: dict[str, Any] = {"targets": spec, "nodes": paused}
            if errors:
                value["not_running"] = errors
            return complete(op, outcome(value, bool(paused), _why(errors)))
        if op.f == "stop-pause":
            nodes = sorted(self.paused)
            self.heal(test)
            return complete(op, outcome({"nodes": nodes}, True))
        raise ValueError(f"pause nemesis: unexpected f {op.f!r}")

    def heal(self, test: Any) -> None:
        on_nodes(test, lambda r: resume_all(test.db, r))
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
        """Completion of a start: ``restarted`` (stopped, then running again), ``stopped`` (per node
        ``clean``/``forced``/``absent``) and ``not_restarted: {node: why}``; applied when at least
        one server was restarted."""
        if op.f == "stop-restart":
            return complete(op, outcome({}, True))
        if op.f != "start-restart":
            raise ValueError(f"restart nemesis: unexpected f {op.f!r}")
        spec = op.value if op.value is not None else test.rng.choice(self.targets)
        nodes = choose_nodes(test, spec)
        if not nodes:
            return not_applied(op, f"no node matched target {spec!r}", targets=spec, nodes=[])

        pidfile = getattr(test.db, "pidfile", None)

        def one(remote: Any) -> tuple[str, str | None]:
            if pidfile:
                res = sh(remote, terminate_script(str(pidfile)), check=False)
                if res.exit_code != 0:
                    return "error", f"stop failed: {res.stderr.strip() or res.exit_code}"
                how = str(res.stdout.strip())
            else:
                was = running_any(test.db, remote)
                kill_all(test.db, remote)
                how = "forced" if was else "absent"
            why = _start(test, remote)
            if why is None and how == "absent":
                why = "no server was running (started one)"
            return how, why

        res = on_nodes(test, one, nodes)
        stopped = {n: r[0] for n, r in res.items()}
        why = {n: r[1] for n, r in res.items() if r[1]}
        restarted = [n for n in nodes if n not in why]
        value: dict[str, Any] = {"targets": spec, "nodes": nodes, "stopped": stopped, "restarted": restarted}
        if why:
            value["not_restarted"] = why
        return complete(op, outcome(value, bool(restarted), _why(why)))
