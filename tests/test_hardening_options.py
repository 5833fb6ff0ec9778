"""Issue 26 items 4 and 10: `chaos gate --list` streams and checks what the real gate would, and the
lesser leniencies of `--nemesis`, `--nemesis-opt`, `--format`, `--preset` and `chaos heal
--cluster-name` are refused with 254 and one line. No Docker: every command here stops before a
cluster is touched (`--provider ssh` without nodes, `--list`, a missing cluster)."""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = "import sys; from chaos.cli import main; sys.exit(main())"


def chaos(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    home = cwd or Path(tempfile.mkdtemp(prefix="chaos-home-"))  # no real cluster state is seen
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", CODE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def refused(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 254, (res.returncode, res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for w in words:
        assert w in res.stderr, (w, res.stderr)


# -- item 4: chaos gate --list ------------------------------------------------------------------


def _limit_memory() -> None:
    limit = 1 << 30  # 1 GiB of address space: the whole matrix of --runs 10**9 needs several
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_gate_list_streams_a_huge_matrix_in_bounded_memory() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, "gate", "--runs", "1000000000", "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        preexec_fn=_limit_memory,
    )
    assert proc.stdout is not None and proc.stderr is not None
    t0 = time.monotonic()
    first = [proc.stdout.readline() for _ in range(3)]
    took = time.monotonic() - t0
    proc.stdout.close()  # the reader stops, as `| head -3` does
    rc = proc.wait(30)
    err = proc.stderr.read().decode()
    assert all(
        line.startswith(b"chaos run --workload log --nemesis partition-random-halves ") for line in first
    ), (
        first,
        err,
    )
    assert took < 20, f"the first lines took {took:.1f} s"
    assert rc == 0 and err == "", (rc, err)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workload", "nope"], ["--workload nope", "unknown workload"]),
        (["--workload", "register", "--nemesis", "bogus"], ["unknown nemesis bogus"]),
        (["--workload", "register", "--nemesis", "nomod_xyz:THING"], ["nomod_xyz"]),
        (["--run-arg", "--bogus"], ["No such option", "--bogus"]),
        (["--run-arg", "--read-mode nope"], ["--read-mode", "nope"]),
        (["--run-arg", "--rate abc"], ["--rate", "abc"]),
        (["--run-arg", "--nemesis bogus"], ["unknown nemesis bogus"]),
        (["--run-arg", "--help"], ["would not run a test"]),
        (["--nemesis", "partition-ring,,kill"], ["an empty name"]),
        (["--nemesis", "partition-ring++kill"], ["an empty fault"]),
        (["--preset", ""], ["--preset ''", "expected one of power, elections"]),
    ],
)
def test_gate_list_refuses_what_the_real_gate_would(args: list[str], words: list[str]) -> None:
    refused(chaos("gate", "--list", *args), *words)


def test_gate_list_still_lists_valid_words() -> None:
    res = chaos("gate", "--list", "--workload", "register", "--nemesis", "kill", "--run-arg", "--rate 5")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0].endswith("--rate 5")


# -- item 10: --nemesis, --nemesis-opt ---------------------------------------------------------


@pytest.mark.parametrize("value", ["", "partition-ring,,kill", " , "])
def test_an_empty_nemesis_name_is_refused(value: str) -> None:
    from chaos.errors import ConfigError
    from chaos.nemesis import parse_names

    with pytest.raises(ConfigError, match="an empty name"):
        parse_names(value)
    assert parse_names("none") == [] and parse_names("kill, kill") == ["kill"]
    refused(chaos("run", "--nemesis", value, "--provider", "ssh"), "--nemesis", "an empty name")


def test_a_nemesis_opt_no_chosen_nemesis_reads_is_refused() -> None:
    from chaos import nemesis

    read = nemesis.selected_options("kill")
    with pytest.raises(ValueError, match="no chosen nemesis reads clock_max_rate"):
        nemesis.parse_nemesis_opts(["clock_max_rate=1.5"], read=read)
    assert nemesis.parse_nemesis_opts(["kill_targets=leader"], read=read) == {"kill_targets": ["leader"]}
    refused(
        chaos("run", "--nemesis", "kill", "--nemesis-opt", "clock_max_rate=1.5", "--provider", "ssh"),
        "clock_max_rate",
        "no chosen nemesis reads",
    )
    refused(
        chaos("run", "--nemesis-opt", "kill_targets=leader", "--provider", "ssh"),
        "no chosen nemesis reads kill_targets",
    )
    # read by a chosen nemesis: the run goes on to its next check
    ok = chaos("run", "--nemesis", "kill", "--nemesis-opt", "kill_targets=leader", "--provider", "ssh")
    refused(ok, "--provider ssh needs --nodes")


# -- item 10: --format, --preset, heal --cluster-name ---------------------------------------------

EDN = "[{:type :invoke, :process 0, :f :write, :value 1}\n {:type :ok, :process 0, :f :write, :value 1}]\n"


def test_a_format_the_file_name_contradicts_is_refused(tmp_path: Path) -> None:
    named_jsonl = tmp_path / "h.jsonl"
    named_jsonl.write_text(EDN)  # EDN content under a JSON Lines name: read as EDN it would pass
    refused(chaos("check", "--format", "edn", str(named_jsonl)), "--format edn", "h.jsonl", "jsonl")
    named_edn = tmp_path / "h.edn"
    named_edn.write_text(EDN)
    refused(chaos("check", "--format", "jsonl", str(named_edn)), "--format jsonl", "h.edn")
    res = chaos("check", "--format", "edn", str(named_edn))
    assert res.returncode == 0, res.stderr
    plain = tmp_path / "history"  # a name that promises nothing: the format given is used
    plain.write_text(EDN)
    assert chaos("check", "--format", "edn", str(plain)).returncode == 0


def test_the_check_format_function_names_both() -> None:
    from chaos.history.formats import check_format

    assert check_format(Path("x.edn"), "porcupine-kv") == "porcupine-kv"
    with pytest.raises(ValueError, match=r"--format edn: x.JSONL is named as a jsonl history"):
        check_format(Path("x.JSONL"), "edn")


@pytest.mark.parametrize("name", ["a" * 300, "a" * 32, "Bad/Name", ""])
def test_heal_refuses_a_cluster_name_cluster_up_would_refuse(tmp_path: Path, name: str) -> None:
    refused(chaos("heal", "--cluster-name", name, cwd=tmp_path), "--cluster-name", "cluster name")


def test_heal_of_a_missing_cluster_is_still_254(tmp_path: Path) -> None:
    refused(chaos("heal", "--cluster-name", "a" * 31, cwd=tmp_path), "no docker cluster")
