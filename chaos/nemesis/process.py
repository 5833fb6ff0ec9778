"""Process faults on the DB server: kill, pause ("hammer time"), restart.

Follows ``jepsen.nemesis.combined/db-package``: ``start-kill`` SIGKILLs the server on the chosen
nodes through the DB's ``kill`` and ``stop-kill`` starts them again (``start``; the ``process``
capability, :class:`chaos.control.db.Process`); ``start-pause`` / ``stop-pause`` send SIGSTOP /
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

import random
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chaos.control.db import (
    capabilities,
    kill_all,
    pause_all,
    resume_all,
    running_all,
    running_any,
    start_all,
)
from chaos.control.test import Test
from chaos.history.op import Op
from chaos.nemesis.base import (
    TARGETS,
    NemesisKind,
    NoState,
    Part,
    choose_nodes,
    complete,
    log,
    not_applied,
    on_nodes,
    outcome,
    sh,
)

if TYPE_CHECKING:
    from chaos.control.ssh import Remote


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

    def setup(self, test: Test) -> None:
        pass

    def teardown(self, test: Test) -> None:
        self.heal(test)

    def invoke(self, test: Test, op: Op) -> Op:
        """``start-kill`` completes with ``killed`` (servers that ran before and not after) and, per
        other node, ``not_killed: {node: why}``; ``stop-kill`` with ``nodes`` (restarted) and
        ``not_started: {node: why}`` (those stay down and are started again by ``heal``)."""
        if op.f == "start-kill":
            spec = op.value if op.value is not None else test.rng.choice(self.targets)
            note: dict[str, object] = {}
            nodes = choose_nodes(test, spec, note=note)
            if not nodes:
                return not_applied(op, f"no node matched target {spec!r}", targets=spec, nodes=[])
            running = getattr(test.db, "running", None)

            def one(remote: Remote) -> str | None:
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
            value: dict[str, object] = {"targets": spec, "nodes": nodes, "killed": killed, **note}
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

    def _restart(self, test: Test) -> tuple[list[str], dict[str, str]]:
        """Start every node this nemesis killed: ``(started, {node: why not})``; the failed ones
        stay in ``down``."""
        nodes = sorted(self.down)
        failed = (
            {n: w for n, w in on_nodes(test, lambda r: _start(test, r), nodes).items() if w} if nodes else {}
        )
        self.down = set(failed)
        return [n for n in nodes if n not in failed], failed

    def heal(self, test: Test) -> None:
        _, failed = self._restart(test)
        if failed:  # the recovery wait and the liveness checker judge a node that stays down
            log.warning("kill nemesis: could not start %s", _why(failed))


def _start(test: Test, remote: Remote) -> str | None:
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

    def setup(self, test: Test) -> None:
        pass

    def teardown(self, test: Test) -> None:
        self.heal(test)

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "start-pause":
            spec = op.value if op.value is not None else test.rng.choice(self.targets)
            note: dict[str, object] = {}
            nodes = choose_nodes(test, spec, note=note)

            def one(remote: Remote) -> str | None:
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
            value: dict[str, object] = {"targets": spec, "nodes": paused, **note}
            if errors:
                value["not_running"] = errors
            return complete(op, outcome(value, bool(paused), _why(errors)))
        if op.f == "stop-pause":
            nodes = sorted(self.paused)
            self.heal(test)
            return complete(op, outcome({"nodes": nodes}, True))
        raise ValueError(f"pause nemesis: unexpected f {op.f!r}")

    def heal(self, test: Test) -> None:
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

    def invoke(self, test: Test, op: Op) -> Op:
        """Completion of a start: ``restarted`` (stopped, then running again), ``stopped`` (per node
        ``clean``/``forced``/``absent``) and ``not_restarted: {node: why}``; applied when at least
        one server was restarted."""
        if op.f == "stop-restart":
            return complete(op, outcome({}, True))
        if op.f != "start-restart":
            raise ValueError(f"restart nemesis: unexpected f {op.f!r}")
        spec = op.value if op.value is not None else test.rng.choice(self.targets)
        note: dict[str, object] = {}
        nodes = choose_nodes(test, spec, note=note)
        if not nodes:
            return not_applied(op, f"no node matched target {spec!r}", targets=spec, nodes=[])

        pidfile = getattr(test.db, "pidfile", None)

        def one(remote: Remote) -> tuple[str, str | None]:
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
        value: dict[str, object] = {
            "targets": spec,
            "nodes": nodes,
            "stopped": stopped,
            "restarted": restarted,
        }
        value.update(note)
        if why:
            value["not_restarted"] = why
        return complete(op, outcome(value, bool(restarted), _why(why)))


# ---------------------------------------------------------------------------------------------
# The descriptor (chaos.nemesis)

NAMES = {
    "kill": "SIGKILL the server on one node, a minority or all; restart on stop",
    "kill-leader": "SIGKILL the leader's server; restart on stop",
    "pause": "SIGSTOP the server on one node, a minority or all; SIGCONT on stop",
    "pause-leader": "SIGSTOP the leader's server; SIGCONT on stop",
    "restart": "clean restart (SIGTERM, then start) of one node, a minority or all",
}
DEFAULT_TARGETS = ["one", "minority", "all"]

# stopped (state T) processes whose command line matches MATCH
_STOPPED = (
    "for p in $(ps -eo pid=,stat= | awk '$2 ~ /^T/ {print $1}'); do "
    "if tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -Eq MATCH; then ACTION; fi; done; true"
)


def _targets(opts: Mapping[str, Any], key: str) -> list[str]:
    v = opts.get(key)
    return list(DEFAULT_TARGETS if v is None else v)


def _build(chosen: Sequence[str], opts: Mapping[str, object]) -> list[Part]:
    """One part per kind: kill (``kill_targets``, plus ``leader`` for kill-leader), pause (likewise),
    restart (``restart_targets``)."""
    parts: list[Part] = []
    for kind, cls, leader_name in (
        ("kill", KillNemesis, "kill-leader"),
        ("pause", PauseNemesis, "pause-leader"),
    ):
        targets = _targets(opts, f"{kind}_targets") if kind in chosen else []
        if leader_name in chosen:
            targets.append("leader")
        if targets:
            targets = list(dict.fromkeys(targets))
            parts.append((cls(targets), _pick(targets), _none))
    if "restart" in chosen:
        rt = _targets(opts, "restart_targets")
        parts.append((RestartNemesis(rt), _pick(rt), _none))
    return parts


def _pick(choices: list[str]) -> Any:
    return lambda rng: rng.choice(choices)


def _none(rng: random.Random) -> None:
    return None


def paused_scripts(db: object) -> tuple[str, str]:
    """(resume, detect) shell for stopped server processes: by the DB's ``pidfile`` and its
    ``kill_match`` regex, when it has them; detect prints ``paused process PID`` per process."""
    resume, detect = [], []
    pidfile = getattr(db, "pidfile", None)
    if pidfile:
        q = shlex.quote(str(pidfile))
        resume.append(f"p=$(cat {q} 2>/dev/null) && kill -CONT $p 2>/dev/null; true")
        detect.append(
            f"p=$(cat {q} 2>/dev/null) && ps -o stat= -p $p 2>/dev/null | grep -q '^T' && "
            'echo "paused process $p"; true'
        )
    match = getattr(db, "kill_match", None)
    if match:
        m = shlex.quote(str(match))
        resume.append(_STOPPED.replace("MATCH", m).replace("ACTION", "kill -CONT $p"))
        found = 'case " $seen " in *" $p "*) ;; *) echo "paused process $p";; esac'
        detect.append("seen=$(cat " + shlex.quote(str(pidfile)) + " 2>/dev/null); " if pidfile else "seen=; ")
        detect.append(_STOPPED.replace("MATCH", m).replace("ACTION", found))
    return "; ".join(resume) or "true", " ".join(detect) or "true"


def _heal(remote: Remote, db: object) -> list[str]:
    """Resume stopped servers (SIGCONT by pidfile and ``kill_match``; the DB's ``resume`` with the
    ``pause`` capability). Killed servers are not started (``chaos run`` starts what it killed)."""

    sh(remote, paused_scripts(db)[0], check=False)
    if "pause" in capabilities(db):
        resume_all(db, remote)  # every daemon the DB declares
    return []


def _residue(remote: Remote, db: object) -> list[str]:
    return str(sh(remote, paused_scripts(db)[1], check=False).stdout).splitlines()


NEMESIS = NemesisKind(
    names=NAMES,
    build=_build,
    requires={
        "kill": frozenset({"process"}),
        "kill-leader": frozenset({"process", "primary"}),
        "pause": frozenset({"pause"}),
        "pause-leader": frozenset({"pause", "primary"}),
        "restart": frozenset({"process"}),
    },
    options={"kill_targets": "list", "pause_targets": "list", "restart_targets": "list"},
    target_options={"kill_targets": ("kill",), "pause_targets": ("pause",), "restart_targets": ("restart",)},
    heal=_heal,
    residue=_residue,
    colours={"kill": "#756bb1", "pause": "#31a354", "restart": "#9e9ac8"},
    verbs={
        "kill": {"start": "{nodes} killed", "stop": "{nodes} restarted"},
        "pause": {"start": "{nodes} paused", "stop": "{nodes} resumed"},
        "restart": {"start": "{nodes} restarted cleanly"},
    },
)
"""The process fault module (``chaos.nemeses`` entry point ``process``)."""
