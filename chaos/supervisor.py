"""The exit status of a ``chaos`` command comes from the tool's own completion, never from plug-in
code ending the process (issue 36 item 6: a plug-in calling ``os._exit(0)`` made ``chaos run``
exit 0 with no output; the README promises plug-in code can never make a run exit 0).

:func:`start` forks once, before any command that may run plug-in code runs (every command but
``chaos check`` of one history file with the tool's own options, :func:`chaos.cli.runs_plugins`:
its checkers and models are the tool's built-ins, so it starts without the fork). The child runs the command (and every plug-in
it loads) and, as the command's last act, writes its exit status to a pipe (:func:`completion`:
``exit <status>``). The parent is a supervisor that runs no plug-in code: it forwards the
signals sent to it, waits for the child, and exits with the status the child wrote. A child that
ends without writing one (``os._exit``, a C library ``exit``, a crash of the interpreter) did not
complete: the supervisor prints one ``crashed`` line (naming the code that called ``os._exit``,
which the child records) and exits 255; a child killed by a signal is mirrored (the supervisor
dies of the same signal, as the one process would have before).

Signals (as a shell's job control does it): with a controlling terminal both processes stay in
one process group, so the terminal's Ctrl-C reaches the child directly and the supervisor does
not forward what the kernel sent (``si_code`` ``SI_KERNEL``); a signal sent to the supervisor's
pid with ``kill`` is forwarded once. Without a terminal the child gets a process group of its own
and every SIGINT, SIGTERM and SIGHUP the supervisor receives is forwarded once (a ``killpg`` of
the supervisor's group does not deliver it twice). The child is killed (SIGKILL, ``PR_SET_PDEATHSIG``)
when the supervisor dies, so a ``kill -9`` of ``chaos`` ends the command as it did when it was one
process (its faults stay until ``chaos heal``, its lock is stale): it never runs on unsupervised.

``CHAOS_NO_SUPERVISOR=1`` turns this off (one process, as before); in-process callers of
``chaos.cli.main(argv)`` (tests) are never forked.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from chaos.errors import EXIT_CRASH, error_line

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SI_KERNEL = 0x80  # siginfo si_code of a signal the kernel sent (a terminal's Ctrl-C, hang-up)
_EXIT = b"exit "
_CALLED = b"called "


def start() -> Callable[[Any], None] | None:
    """Fork the supervisor. In the child (which runs the command) return the completion callback
    (call it with the command's exit status just before exiting); in the parent never return
    (exit with the child's status). None when supervision is off or impossible (no ``fork``)."""
    if os.environ.get("CHAOS_NO_SUPERVISOR") or not hasattr(os, "fork"):
        return None
    terminal = _has_terminal()
    mask: set[int] = {*_FORWARDED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, mask)  # nothing lost between fork and wait
    r, w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if not terminal:
            os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        _die_with_parent(parent)
        _record_os_exit(w)
        return lambda status: _complete(w, status)
    os.close(w)
    _supervise(pid, r, terminal, mask)


def _has_terminal() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _complete(w: int, status: Any) -> None:
    code = status if isinstance(status, int) else (0 if status is None else 1)
    try:
        os.write(w, _EXIT + str(code).encode() + b"\n")
    except OSError:
        pass  # the supervisor is gone: nobody reads the status


def _die_with_parent(parent: int) -> None:
    """SIGKILL to this process when the supervisor dies (Linux ``prctl(PR_SET_PDEATHSIG)``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _record_os_exit(w: int) -> None:
    """Wrap ``os._exit`` so a call in this process first tells the supervisor who made it (the
    forked helpers of the tool, other pids, exit as before)."""
    real, me = os._exit, os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == me:
            frame = sys._getframe(1)
            where = (
                f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname} "
                f"({frame.f_code.co_filename}:{frame.f_lineno})"
            )
            try:
                os.write(w, _CALLED + f"os._exit({status!r}) in {where}".encode(errors="replace") + b"\n")
            except OSError:
                pass
        real(status)

    os._exit = _exit


def _supervise(pid: int, r: int, terminal: bool, mask: set[int]) -> NoReturn:
    """Forward signals to ``pid`` until it ends, then exit as :func:`start` says."""
    status = None
    while status is None:
        info = signal.sigtimedwait(mask, 1.0)
        if info is not None and info.si_signo != signal.SIGCHLD:
            if not (terminal and info.si_code == _SI_KERNEL):  # the terminal sent it to both
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:
                    pass
            continue
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
    os.set_blocking(r, False)
    data = b""
    try:
        while chunk := os.read(r, 65536):
            data += chunk
    except BlockingIOError:
        pass  # a forked helper of the child may still hold the pipe open
    lines = data.splitlines()
    exits = [ln[len(_EXIT) :] for ln in lines if ln.startswith(_EXIT)]
    if exits:  # no interpreter teardown here: this process ran no command, so holds nothing to flush
        os._exit(int(exits[-1]))
    if os.WIFSIGNALED(status):  # die of the same signal, as the one process would have
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP keep their action
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        sys.exit(128 + sig)  # a signal whose default action is not to end a process
    called = [ln[len(_CALLED) :].decode(errors="replace") for ln in lines if ln.startswith(_CALLED)]
    code = os.waitstatus_to_exitcode(status)
    how = called[-1] if called else f"exit status {code} without finishing (an exit outside the tool)"
    error_line(f"crashed: the command ended before it finished: {how}; no verdict")
    sys.exit(EXIT_CRASH)
