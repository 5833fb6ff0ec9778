"""Packet faults between DB nodes: loss, delay, rate, duplicate, reorder (``jepsen.net/shape!``).

Jepsen puts a netem band under a prio qdisc with u32 filters on the peers' addresses. Kernels
without netem (ours) get honest fallbacks, chosen per node in ``setup`` by probing:

=========== ======================================= ===========================================
behaviour   with netem                               without netem
=========== ======================================= ===========================================
loss        netem ``loss P%`` (egress to peers)      iptables ``-m statistic`` DROP (ingress from peers)
delay       netem ``delay D ms J ms`` (egress)       NFQUEUE (egress to peers) + the pure-Python
                                                     delayer :mod:`chaos.nemesis.nfqdelay`
rate        htb class rate (egress to peers)         the same (htb is not netem)
duplicate   netem ``duplicate P%``                   the delayer re-sends a copy (raw socket)
reorder     netem ``reorder P% delay D``             the delayer sends P at once, holds the rest
=========== ======================================= ===========================================

A behaviour that some node cannot do raises :class:`Unsupported` from ``setup``, before the run
starts. Shaping only matches the peers' DB addresses (u32 ``ip dst`` / iptables ``-s``), so the
control node's SSH traffic keeps full speed. Everything the tool installs is marked: qdisc handle
``c4a5:``, iptables chains ``CHAOS-PACKET`` (INPUT) and ``CHAOS-PACKET-OUT`` (OUTPUT), the
delayer's pidfile ``/var/run/chaos-nemesis/nfqdelay.pid``. The NFQUEUE rule has ``--queue-bypass``, so
a dead delayer never blackholes traffic; duplicates carry mark ``0xc4a5``, which the rule skips.

Ops: ``start-packet`` value ``{"behaviour": {"loss": 0.2}, "targets": "one"}`` or an exact
``{"behaviour": ..., "nodes": [...]}``; completion adds ``"nodes"`` and ``"mechanism": {node: name}``.
``stop-packet`` removes every shaping and completes with ``{"healed": [nodes]}``, plus the
delayers' counters (``"nfqueue": {node: {...}}``) and any delayer that had died early
(``"delayer_exited"``).
"""

from __future__ import annotations

import json
import os
import random
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chaos.control.test import Test
from chaos.errors import ConfigError
from chaos.history.op import Op
from chaos.nemesis.base import (
    STATE_DIR,
    NemesisError,
    NemesisKind,
    choose_nodes,
    complete,
    node_names,
    not_applied,
    on_nodes,
    outcome,
    sh,
)
from chaos.nemesis.partition import chain_script, drop_chain_script

if TYPE_CHECKING:
    from chaos.control.ssh import Remote

HANDLE = "c4a5"
CHAIN_IN = "CHAOS-PACKET"
CHAIN_OUT = "CHAOS-PACKET-OUT"
QUEUE = 7
PROBE_QUEUE = 8  # a different queue, so probing works while a delayer holds QUEUE
MARK = 0xC4A5  # SO_MARK of the delayer's duplicates; the NFQUEUE rule skips it
DELAYER = f"{STATE_DIR}/nfqdelay.py"
DELAYER_PID = f"{STATE_DIR}/nfqdelay.pid"
DELAYER_LOG = f"{STATE_DIR}/nfqdelay.log"
NFQUEUE_BEHAVIOURS = ("delay", "reorder", "duplicate")

BEHAVIOURS = ("loss", "delay", "rate", "duplicate", "reorder")

# Jepsen's defaults (net.clj): delay 50 ms +- 10 ms; loss/duplicate/reorder 20 %; rate 1 mbit.
DEFAULTS: dict[str, object] = {
    "loss": 0.2,
    "delay": {"ms": 50, "jitter_ms": 10},
    "rate": {"kbit": 1000},
    "duplicate": 0.2,
    "reorder": 0.2,
}


class Unsupported(ConfigError):
    """A requested fault has no mechanism on some node; raised before the run starts."""


PROBE = r"""
have() { command -v "$1" >/dev/null 2>&1; }
probe_qdisc() {
  if unshare -n true 2>/dev/null; then
    unshare -n sh -c "ip link set lo up; tc qdisc add dev lo root $1" >/dev/null 2>&1 && echo yes || echo no
  else
    if tc qdisc add dev lo root handle ffc0: $1 >/dev/null 2>&1; then tc qdisc del dev lo root; echo yes; else echo no; fi
  fi
}
if have tc; then echo "netem=$(probe_qdisc 'netem delay 1ms')"; echo "htb=$(probe_qdisc 'htb default 1')";
else echo netem=no; echo htb=no; fi
if have iptables; then
  iptables -w -N CHAOS-PROBE 2>/dev/null
  iptables -w -A CHAOS-PROBE -m statistic --mode random --probability 0.5 -j RETURN 2>/dev/null \
    && echo statistic=yes || echo statistic=no
  iptables -w -A CHAOS-PROBE -j NFQUEUE --queue-num 7 --queue-bypass 2>/dev/null && q=yes || q=no
  iptables -w -A CHAOS-PROBE -m mark ! --mark 0xc4a5 -j RETURN 2>/dev/null && echo mark=yes || echo mark=no
  iptables -w -F CHAOS-PROBE 2>/dev/null; iptables -w -X CHAOS-PROBE 2>/dev/null
  if [ $q = yes ]; then
    have python3 || { echo nfqueue=no; echo "nfqueue_why=python3 is missing"; }
  else echo nfqueue=no; echo "nfqueue_why=the iptables NFQUEUE target (--queue-bypass) is refused"; fi
else echo statistic=no; echo nfqueue=no; echo "nfqueue_why=iptables is missing"; echo mark=no; fi
"""


def probe_script(delayer_src: str) -> str:
    """:data:`PROBE` plus, where the NFQUEUE target works, the delayer's own ``--probe``: it binds
    nfnetlink queue :data:`PROBE_QUEUE` and opens a marked raw socket (``nfqueue=``, ``rawsend=``,
    with ``*_why=`` reasons)."""
    return (
        PROBE
        + 'if [ "${q:-no}" = yes ] && have python3; then\n'
        + "f=$(mktemp /tmp/chaos-nfqprobe.XXXXXX)\n"
        + f"cat > $f <<'CHAOS_EOF'\n{delayer_src}\nCHAOS_EOF\n"
        + f"python3 $f --probe --queue {PROBE_QUEUE} --mark {MARK:#x} 2>/dev/null "
        + "|| { echo nfqueue=no; echo nfqueue_why=the delayer probe exited $?; }\n"
        + "rm -f $f\nfi\n"
    )


def parse_probe(text: str) -> dict[str, bool]:
    """``netem=yes`` lines -> ``{"netem": True}`` (``*_why=`` reason lines are skipped; see
    :func:`parse_reasons`). A later line for the same capability wins."""
    out: dict[str, bool] = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.strip().split("=", 1)
            if not k.endswith("_why"):
                out[k] = v == "yes"
    return out


def parse_reasons(text: str) -> dict[str, str]:
    """``nfqueue_why=...`` lines -> ``{"nfqueue": "..."}``: why a capability is missing."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and k.endswith("_why"):
            out[k[: -len("_why")]] = v
    return out


def mechanism(behaviour: str, caps: Mapping[str, bool]) -> str | None:
    """The mechanism a node with capabilities ``caps`` uses for ``behaviour``, or None."""
    if behaviour == "rate":
        return "htb" if caps.get("htb") else None
    if caps.get("netem"):
        return "netem"
    if behaviour == "loss" and caps.get("statistic"):
        return "iptables-statistic"
    if behaviour in ("delay", "reorder") and caps.get("nfqueue"):
        return "nfqueue"
    if behaviour == "duplicate" and caps.get("nfqueue") and caps.get("rawsend") and caps.get("mark"):
        return "nfqueue"
    return None


def why_not(behaviour: str, caps: Mapping[str, bool], reasons: Mapping[str, str] | None = None) -> str:
    """Why ``behaviour`` has no mechanism on a node with ``caps`` (``reasons`` from the probe)."""
    reasons = reasons or {}
    if behaviour == "rate":
        return "tc htb is not available"
    if behaviour == "loss":
        return "neither tc netem nor iptables -m statistic is available"
    if behaviour in NFQUEUE_BEHAVIOURS:
        if not caps.get("nfqueue"):
            why = reasons.get("nfqueue", "nfnetlink queue binding was not probed")
            return f"tc netem is missing and the NFQUEUE delayer cannot run: {why}"
        if not caps.get("rawsend"):
            why = reasons.get("rawsend", "no raw socket")
            return f"tc netem is missing and the delayer cannot re-send copies: {why}"
        return "tc netem is missing and iptables has no mark match (needed to skip the copies)"
    return "it needs tc netem, which this node's kernel lacks"


def check_behaviour(name: str, value: object) -> object:
    """Validate one behaviour's parameters; raises ValueError naming the bad one."""
    if name in ("loss", "duplicate", "reorder"):
        if not isinstance(value, int | float) or not 0 < value <= 1:
            raise ValueError(f"packet {name} {value!r}: expected a probability in (0, 1]")
        return float(value)
    if name == "delay":
        if not isinstance(value, dict) or not isinstance(value.get("ms"), int | float) or value["ms"] <= 0:
            raise ValueError(f"packet delay {value!r}: expected {{'ms': positive, 'jitter_ms': >= 0}}")
        return {"ms": value["ms"], "jitter_ms": value.get("jitter_ms", 0)}
    if name == "rate":
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("kbit"), int | float)
            or value["kbit"] <= 0
        ):
            raise ValueError(f"packet rate {value!r}: expected {{'kbit': positive}}")
        return {"kbit": value["kbit"]}
    raise ValueError(f"packet behaviour {name!r}: expected one of {', '.join(BEHAVIOURS)}")


def netem_args(behaviour: Mapping[str, Any]) -> list[str]:
    """netem parameters for the netem-handled behaviours (Jepsen's correlations)."""
    args: list[str] = []
    delay = behaviour.get("delay")
    if "reorder" in behaviour and not delay:
        delay = {"ms": 10, "jitter_ms": 0}  # netem reorders only delayed packets
    if delay:
        args += ["delay", f"{delay['ms']}ms", f"{delay.get('jitter_ms', 0)}ms", "25%"]
    if "loss" in behaviour:
        args += ["loss", f"{behaviour['loss'] * 100:g}%", "75%"]
    if "duplicate" in behaviour:
        args += ["duplicate", f"{behaviour['duplicate'] * 100:g}%", "75%"]
    if "reorder" in behaviour:
        args += ["reorder", f"{behaviour['reorder'] * 100:g}%", "75%"]
    return args


def shape_script(
    peers: Sequence[str],
    behaviour: Mapping[str, Any],
    mech: Mapping[str, str],
    delayer_src: str | None = None,
) -> str:
    """Shell for one node: shape its traffic with the given peers' addresses.

    ``mech`` maps each behaviour to the mechanism chosen for this node.
    """
    lines = [heal_script(), "set -e", f"mkdir -p {STATE_DIR}"]
    tc_needed = any(m in ("htb", "netem") for m in mech.values())
    if tc_needed:
        rate = behaviour.get("rate", {}).get("kbit") if mech.get("rate") == "htb" else None
        peer_rate = f"{rate}kbit" if rate else "10gbit"
        netem = netem_args({b: v for b, v in behaviour.items() if mech.get(b) == "netem"})
        # One htb tree per egress device that routes to a peer.
        lines.append(
            "devs=''; for p in " + " ".join(shlex.quote(p) for p in peers) + "; do "
            "d=$(ip -o route get $p | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
            'case " $devs " in *" $d "*) ;; *) devs="$devs $d";; esac; done'
        )
        tree = [
            f"tc qdisc add dev $d root handle {HANDLE}: htb default 1",
            f"tc class add dev $d parent {HANDLE}: classid {HANDLE}:1 htb rate 10gbit",
            f"tc class add dev $d parent {HANDLE}: classid {HANDLE}:2 htb rate {peer_rate} ceil {peer_rate}",
        ]
        if netem:
            tree.append(f"tc qdisc add dev $d parent {HANDLE}:2 handle c4a6: netem {' '.join(netem)}")
        for p in peers:
            tree.append(
                f"tc filter add dev $d parent {HANDLE}: protocol ip prio 1 u32 match ip dst "
                f"$(getent ahostsv4 {shlex.quote(p)} | head -n1 | cut -d' ' -f1)/32 flowid {HANDLE}:2"
            )
        lines.append("for d in $devs; do " + "; ".join(tree) + "; done")
    if mech.get("loss") == "iptables-statistic":
        lines.append(chain_script(CHAIN_IN, "INPUT"))
        lines.append(
            shlex.join(["iptables", "-w", "-A", CHAIN_IN, "-s", ",".join(peers), "-m", "statistic"])
            + f" --mode random --probability {behaviour['loss']:.4f} -j DROP"
        )
    nfq = {b: behaviour[b] for b in NFQUEUE_BEHAVIOURS if mech.get(b) == "nfqueue"}
    if nfq:
        if delayer_src is None:
            raise ValueError("nfqueue delay/reorder/duplicate needs the delayer source")
        lines.append(f"cat > {DELAYER} <<'CHAOS_EOF'\n{delayer_src}\nCHAOS_EOF")
        lines.append(
            shlex.join(["setsid", "nohup", "python3", DELAYER, *delayer_args(nfq), "--pidfile", DELAYER_PID])
            + f" >{DELAYER_LOG} 2>&1 </dev/null &"
        )
        # The delayer writes its pidfile once the queue is bound; fail if it dies first.
        lines.append(
            "dp=$!; i=0; while [ ! -s " + DELAYER_PID + " ]; do "
            "st=$(cut -d' ' -f3 /proc/$dp/stat 2>/dev/null || echo X); "
            'case "$st" in Z|X) echo "nfqueue delayer exited: $(tail -n 3 '
            + DELAYER_LOG
            + ')" >&2; exit 1;; esac; '
            "i=$((i+1)); if [ $i -gt 200 ]; then kill $dp; echo 'nfqueue delayer not ready after 10 s' >&2; "
            "exit 1; fi; sleep 0.05; done"
        )
        lines.append(chain_script(CHAIN_OUT, "OUTPUT"))
        rule = ["iptables", "-w", "-A", CHAIN_OUT, "-d", ",".join(peers)]
        if "duplicate" in nfq:
            rule += ["-m", "mark", "!", "--mark", f"{MARK:#x}"]
        rule += ["-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]
        lines.append(shlex.join(rule))
    return "\n".join(lines)


def delayer_args(nfq: Mapping[str, Any]) -> list[str]:
    """Command-line arguments of :mod:`chaos.nemesis.nfqdelay` for the nfqueue-handled behaviours."""
    args = ["--queue", str(QUEUE), "--mark", f"{MARK:#x}"]
    if "delay" in nfq:
        d = nfq["delay"]
        args += ["--delay-ms", f"{d['ms']:g}", "--jitter-ms", f"{d.get('jitter_ms', 0):g}"]
    if "reorder" in nfq:
        args += ["--reorder", f"{nfq['reorder']:g}"]
    if "duplicate" in nfq:
        args += ["--duplicate", f"{nfq['duplicate']:g}"]
    return args


# Delayer processes, found by their script path as argv[1] (never this shell, whose argv[1] is -c).
_DELAYER_PIDS = (
    "for d in /proc/[0-9]*; do "
    f"[ \"$(tr '\\0' '\\n' < $d/cmdline 2>/dev/null | sed -n 2p)\" = {DELAYER} ] && echo ${{d#/proc/}}; "
    "done"
)


def stop_delayer_script() -> str:
    """Stop every delayer on a node: SIGTERM (it accepts what it holds and unbinds), up to 5 s, then
    SIGKILL; remove the pidfile. Idempotent. Delayers are found by their command line, not the
    pidfile alone, so a lost pidfile leaves none behind and a stale one kills nothing else.

    Prints ``nfqdelay-stats {json}`` (the stopped delayer's counters) and, when the pidfile outlived
    its process (the delayer died early, so the fault silently stopped: ``--queue-bypass``),
    ``nfqdelay-exited <last log line>``; the log is then moved to ``nfqdelay.log.old``."""
    return (
        f"ps=$({_DELAYER_PIDS}); "
        # alive = exists and is not a zombie
        "live() { for p in $ps; do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); "
        '[ -n "$s" ] && [ "$s" != Z ] && return 0; done; return 1; }; '
        f"early=no; [ -f {DELAYER_PID} ] && ! live && early=yes; "
        'if [ -n "$(echo $ps)" ]; then kill $ps 2>/dev/null; i=0; '
        "while [ $i -lt 100 ] && live; do i=$((i+1)); sleep 0.05; done; "
        "live && kill -9 $ps 2>/dev/null; fi; "
        f"if [ -f {DELAYER_LOG} ]; then "
        f"s=$(sed -n 's/^nfqdelay: stopped: //p' {DELAYER_LOG} | tail -n 1); "
        '[ -n "$s" ] && echo "nfqdelay-stats $s"; '
        f'[ $early = yes ] && echo "nfqdelay-exited $(tail -n 1 {DELAYER_LOG})"; '
        f"mv -f {DELAYER_LOG} {DELAYER_LOG}.old; fi; "
        f"rm -f {DELAYER_PID}"
    )


def parse_stop(text: str) -> tuple[dict[str, object] | None, str | None]:
    """The heal script's output on one node -> (delayer counters or None, early-exit line or None)."""
    stats: dict[str, object] | None = None
    exited: str | None = None
    for line in text.splitlines():
        if line.startswith("nfqdelay-stats "):
            try:
                stats = json.loads(line.split(" ", 1)[1])
            except ValueError:
                stats = None
        elif line.startswith("nfqdelay-exited"):
            exited = line[len("nfqdelay-exited") :].strip() or "no log"
    return stats, exited


def heal_script() -> str:
    """Remove everything this nemesis may have installed on a node (idempotent): the tool's qdiscs,
    its iptables chains and jumps (first, so no packet is queued any more), then the delayer."""
    return "; ".join(
        [
            "for d in $(ls /sys/class/net); do "
            f"if tc qdisc show dev $d 2>/dev/null | grep -q 'qdisc htb {HANDLE}: root'; "
            "then tc qdisc del dev $d root; fi; done",
            drop_chain_script(CHAIN_IN, "INPUT"),
            drop_chain_script(CHAIN_OUT, "OUTPUT"),
            stop_delayer_script(),
            "true",
        ]
    )


def delayer_residue_script() -> str:
    """Shell printing ``nfqdelay process PID`` for each delayer still running on a node."""
    return f"for p in $({_DELAYER_PIDS}); do echo nfqdelay process $p; done; true"


def _delayer_source() -> str:
    with open(os.path.join(os.path.dirname(__file__), "nfqdelay.py")) as f:
        return f.read()


class PacketNemesis:
    """``start-packet`` / ``stop-packet`` with the enabled behaviours (one per start, at random)."""

    kind = "packet"

    def __init__(
        self,
        behaviours: Mapping[str, object],
        targets: Sequence[str] = ("one", "minority", "majority", "all"),
    ) -> None:
        if not behaviours:
            raise ValueError(f"packet behaviours: expected some of {', '.join(BEHAVIOURS)}")
        self.behaviours = {k: check_behaviour(k, v) for k, v in behaviours.items()}
        self.targets = list(targets)
        self.caps: dict[str, dict[str, bool]] = {}
        self.reasons: dict[str, dict[str, str]] = {}

    def fs(self) -> set[str]:
        return {"start-packet", "stop-packet"}

    def probe(self, test: Test) -> dict[str, dict[str, bool]]:
        """Capabilities of every node: ``{node: {"netem": bool, "htb": bool, "statistic": bool,
        "mark": bool, "nfqueue": bool, "rawsend": bool}}``; ``nfqueue`` means the delayer really
        bound an nfnetlink queue there. Reasons for missing ones go to ``self.reasons``."""
        script = probe_script(_delayer_source())
        res = on_nodes(test, lambda r: sh(r, script, check=False))
        self.caps = {n: parse_probe(r.stdout) for n, r in res.items()}
        self.reasons = {n: parse_reasons(r.stdout) for n, r in res.items()}
        return self.caps

    def setup(self, test: Test) -> None:
        """Probe every node and raise :class:`Unsupported` naming the node, the fault and why if
        any enabled behaviour has no mechanism there."""
        self.probe(test)
        problems = [
            f"packet-{b} on {n}: {why_not(b, caps, self.reasons.get(n))}"
            for n, caps in sorted(self.caps.items())
            for b in self.behaviours
            if mechanism(b, caps) is None
        ]
        if problems:
            raise Unsupported("unsupported nemesis: " + "; ".join(problems))
        self.heal(test)

    def teardown(self, test: Test) -> None:
        self.heal(test)

    def heal(self, test: Test) -> None:
        on_nodes(test, lambda r: sh(r, heal_script()))

    def stop(self, test: Test) -> dict[str, object]:
        """Heal every node; the completion value: ``{"healed": [nodes]}`` plus, where a delayer ran,
        ``"nfqueue": {node: {"queued": n, "accepted": n, "duplicated": n, "max_held": n}}`` and
        ``"delayer_exited": {node: last log line}`` for a delayer that died before the stop."""
        res = on_nodes(test, lambda r: sh(r, heal_script()))
        value: dict[str, Any] = {"healed": node_names(test)}
        for n in sorted(res):
            stats, exited = parse_stop(res[n].stdout)
            if stats is not None:
                value.setdefault("nfqueue", {})[n] = stats
            if exited is not None:
                value.setdefault("delayer_exited", {})[n] = exited
        return value

    def invoke(self, test: Test, op: Op) -> Op:
        if op.f == "stop-packet":
            return complete(op, self.stop(test))
        if op.f != "start-packet":
            raise ValueError(f"packet nemesis: unexpected f {op.f!r}")
        value = dict(op.value) if isinstance(op.value, dict) else {}
        if "behaviour" not in value:
            b = test.rng.choice(sorted(self.behaviours))
            value["behaviour"] = {b: self.behaviours[b]}
        behaviour = {k: check_behaviour(k, v) for k, v in value["behaviour"].items()}
        spec = value.get("nodes") or value.get("targets") or test.rng.choice(self.targets)
        note: dict[str, object] = {}
        nodes = choose_nodes(test, spec, note=note)
        if not nodes:
            return not_applied(
                op, f"no node matched target {spec!r}", targets=spec, nodes=[], behaviour=behaviour
            )
        if not self.caps:
            self.probe(test)
        addr = {n.name: n.peer_host for n in test.nodes}
        mechs: dict[str, dict[str, str]] = {}
        for n in nodes:
            mechs[n] = {}
            for b in behaviour:
                m = mechanism(b, self.caps.get(n, {}))
                if m is None:
                    why = why_not(b, self.caps.get(n, {}), self.reasons.get(n))
                    raise Unsupported(f"packet-{b} on {n}: {why}")
                mechs[n][b] = m
        src = _delayer_source() if any("nfqueue" in m.values() for m in mechs.values()) else None

        def one(remote: Remote) -> None:
            name = remote.node.name
            peers = [addr[x] for x in addr if x != name]
            res = sh(remote, shape_script(peers, behaviour, mechs[name], src), check=False)
            if res.exit_code != 0:
                raise NemesisError(f"packet shaping on {name} failed: {res.stderr.strip()[-500:]}")

        on_nodes(test, one, nodes)
        mechanism_by_node = {n: ",".join(sorted(set(m.values()))) for n, m in mechs.items()}
        value = {"targets": spec, "nodes": nodes, "behaviour": behaviour, "mechanism": mechanism_by_node}
        return complete(op, outcome({**value, **note}, True))


def describe(value: object) -> str:
    return json.dumps(value, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# The descriptor (chaos.nemesis)

NAMES = {
    "packet-loss": ("loss", "drop a fraction of DB packets (netem, else iptables statistic)"),
    "packet-delay": ("delay", "delay DB packets (netem, else an NFQUEUE delayer on the node)"),
    "packet-rate": ("rate", "limit the DB traffic rate (htb)"),
    "packet-duplicate": (
        "duplicate",
        "duplicate DB packets (netem, else the NFQUEUE delayer re-sends copies)",
    ),
    "packet-reorder": ("reorder", "reorder DB packets (netem, else NFQUEUE verdicts out of order)"),
    # chaos sim's names for the same faults (issue 35 item 10: run, gate and sim take the same names)
    "slow-network": ("delay", "alias of packet-delay (chaos sim's name): messages held on live links"),
    "network": (("loss", "duplicate"), "packet-loss and packet-duplicate at once (chaos sim's name)"),
}


def _behaviours_of(name: str) -> tuple[str, ...]:
    b = NAMES[name][0]
    return (b,) if isinstance(b, str) else tuple(b)


RESIDUE = f"""
for c in {CHAIN_IN} {CHAIN_OUT}; do
  iptables -w -S $c >/dev/null 2>&1 && echo "iptables chain $c: $(iptables -w -S $c | grep -c -- '^-A') rules"
done
iptables -w -S 2>/dev/null | grep -E -- '-j ({CHAIN_IN}|{CHAIN_OUT})( |$)' | sed 's/^/iptables jump: /'
for d in $(ls /sys/class/net); do
  tc qdisc show dev $d 2>/dev/null | grep -E '{HANDLE}:|c4a6:' | sed "s/^/qdisc on $d: /"
done
[ -f {DELAYER_PID} ] && kill -0 $(cat {DELAYER_PID}) 2>/dev/null && echo "running nfqdelay loop"
true
"""


def _behaviours(chosen: Sequence[str], opts: Mapping[str, object]) -> dict[str, object]:
    """The enabled behaviours with their parameters: Jepsen's defaults, overridden by
    ``packet_loss``, ``packet_delay_ms``/``packet_delay_jitter_ms``, ``packet_rate_kbit``,
    ``packet_duplicate``, ``packet_reorder``."""
    out = {b: DEFAULTS[b] for n in chosen for b in _behaviours_of(n)}
    if "packet_loss" in opts:  # adds loss to any packet fault, as it always did
        out["loss"] = opts["packet_loss"]
    if "delay" in out and "packet_delay_ms" in opts:
        jitter = opts.get("packet_delay_jitter_ms")
        out["delay"] = {"ms": opts["packet_delay_ms"], "jitter_ms": 0 if jitter is None else jitter}
    if "rate" in out and "packet_rate_kbit" in opts:
        out["rate"] = {"kbit": opts["packet_rate_kbit"]}
    for b in ("duplicate", "reorder"):
        if b in out and f"packet_{b}" in opts:
            out[b] = opts[f"packet_{b}"]
    return out


def _build(chosen: Sequence[str], opts: Mapping[str, Any]) -> object:
    targets = opts.get("packet_targets")
    targets = list(["one", "minority", "majority", "all"] if targets is None else targets)
    packet = PacketNemesis(_behaviours(chosen, opts), targets)
    names = sorted(packet.behaviours)

    def start(rng: random.Random) -> dict[str, object]:
        b = rng.choice(names)
        return {"behaviour": {b: packet.behaviours[b]}, "targets": rng.choice(targets)}

    return packet, start, None


def _heal(remote: Remote, db: object) -> list[str]:
    sh(remote, heal_script(), check=False)
    return []


def _residue(remote: Remote, db: object) -> list[str]:
    # a delayer whose pidfile was lost is found by its command line
    return str(sh(remote, RESIDUE + delayer_residue_script(), check=False).stdout).splitlines()


NEMESIS = NemesisKind(
    names={n: d for n, (_, d) in NAMES.items()},
    build=_build,
    options={
        "packet_loss": "json",
        "packet_delay_ms": "number",
        "packet_delay_jitter_ms": "number",
        "packet_rate_kbit": "number",
        "packet_duplicate": "json",
        "packet_reorder": "json",
        "packet_targets": "list",
    },
    target_options={"packet_targets": tuple(NAMES)},
    heal=_heal,
    residue=_residue,
    colours={"packet": "#e7ba52"},
    verbs={"packet": {"start": "[{nodes} ]packet faults started", "stop": "packet faults stopped"}},
)
"""The packet fault module (``chaos.nemeses`` entry point ``packet``)."""
