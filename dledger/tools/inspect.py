"""Read-only inspection of a FileLogStore directory: ``dledger inspect DIR`` (or ``python -m dledger.tools.inspect DIR``).

Prints begin/end index, the checkpoint, the size of every segment file, and verifies every record (magic, size, pos, index
sequence, term order, bodyCrc, chainCrc, index records) without modifying anything. Exit status:
0 when every check passes, 1 when a record or index record fails, 254 for bad arguments.

File faults (issue 7), for a stopped node, each printing a JSON description of what it did:
``--truncate-tail N`` (drop the last N written bytes of the newest data segment: a torn write),
``--flip-bit POS`` (flip bit ``--bit`` of the byte at absolute data-log offset POS).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dledger.store import codec
from dledger.store.hardstate import read_properties

_NAME = re.compile(r"^\d{20}$")


@dataclass
class Inspection:
    """The result of :func:`inspect_store`; ``problems`` is empty when the store verifies."""

    directory: str
    data_file_size: int
    begin_index: int = 0
    end_index: int = -1
    end_term: int = -1
    entries: int = 0
    next_pos: int = 0
    checkpoint: dict[str, str] | None = None
    files: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _segments(d: Path) -> list[tuple[int, Path]]:
    if not d.is_dir():
        return []
    return sorted((int(p.name), p) for p in d.iterdir() if _NAME.match(p.name))


def inspect_store(directory: str | os.PathLike[str], data_file_size: int | None = None) -> Inspection:
    """Scan and verify the store in ``directory`` without changing it.

    ``data_file_size`` defaults to the largest data file's size.
    Raises FileNotFoundError when ``directory/data`` does not exist.
    """
    d = Path(directory)
    if not (d / "data").is_dir():
        raise FileNotFoundError(f"{d}: not a store directory (no data/ subdirectory)")
    data = _segments(d / "data")
    if data_file_size is None:
        data_file_size = max((p.stat().st_size for _, p in data), default=0)
    fsize = data_file_size
    ins = Inspection(str(d), fsize, checkpoint=read_properties(d / "checkpoint"))
    for sub in ("data", "index"):
        for _, p in _segments(d / sub):
            ins.files[f"{sub}/{p.name}"] = {"size": p.stat().st_size}

    expect: int | None = None
    prev_term, prev_chain = -1, None
    begin: int | None = None
    recs: list[tuple[int, int, int, int, int]] = []  # magic, pos, size, index, term
    next_pos = data[0][0] if data else 0
    for fi, (start, p) in enumerate(data):
        if fi and start != data[fi - 1][0] + fsize:
            ins.problems.append(f"{p}: expected file {data[fi - 1][0] + fsize:020d} before it")
            break
        buf = p.read_bytes()
        rel = 0
        if start == 0 and fi == 0:
            expect, prev_chain = 0, 0
        stop = False
        while rel + 4 <= len(buf):
            magic = int.from_bytes(buf[rel : rel + 4], "big", signed=True)
            if magic == codec.BLANK_MAGIC:
                gap = int.from_bytes(buf[rel + 4 : rel + 8], "big", signed=True)
                if fi == 0 and rel == 0 and 8 <= gap < fsize:
                    # leading gap of a log restarted by INSTALL_SNAPSHOT (FileLogStore.reset)
                    rel, expect, prev_chain = gap, None, None
                    continue
                rel = len(buf)
                break
            if magic == 0 and not any(buf[rel : rel + codec.HEADER_SIZE]):
                stop = True
                break
            h, reason = codec.check_record(
                buf, rel, abs_pos=start + rel, expect_index=expect, min_term=prev_term, prev_chain=prev_chain
            )
            if reason is not None:
                ins.problems.append(f"{p}: offset {rel}: entry {expect}: {reason}")
                stop = True
                break
            if begin is None:
                begin = h.index
            recs.append((h.magic, start + rel, h.size, h.index, h.term))
            expect, prev_term, prev_chain = h.index + 1, h.term, h.chain_crc
            rel += h.size
        next_pos = start + rel
        if stop:
            later = [q.name for _, q in data[fi + 1 :]]
            if later:
                ins.problems.append(f"{p}: log ends at offset {rel} but later data files exist: {later}")
            break
    ins.begin_index = begin if begin is not None else 0
    ins.entries = len(recs)
    ins.end_index = ins.begin_index + len(recs) - 1
    ins.end_term = recs[-1][4] if recs else -1
    ins.next_pos = next_pos

    # Index records must agree with the data.
    index = {start: p for start, p in _segments(d / "index")}
    isize = max((p.stat().st_size for p in index.values()), default=0)
    cache: dict[int, bytes] = {}
    for r in recs:
        off = r[3] * codec.INDEX_UNIT_SIZE
        if not isize:
            ins.problems.append(f"{d / 'index'}: no index files")
            break
        start = off - off % isize
        if start not in cache:
            cache[start] = index[start].read_bytes() if start in index else b""
        got = cache[start][off - start : off - start + codec.INDEX_UNIT_SIZE]
        if len(got) < codec.INDEX_UNIT_SIZE or codec.decode_index(got) != r:
            ins.problems.append(f"index record of entry {r[3]} (file {start:020d}) disagrees with the data")
            break
    return ins


def truncate_tail(directory: str | os.PathLike[str], nbytes: int) -> dict[str, int | str]:
    """Drop the last ``nbytes`` written bytes of the newest data segment (a torn write): the file is
    truncated at ``written end - nbytes`` (not below 0). Raises ValueError for ``nbytes < 0``."""
    if nbytes < 0:
        raise ValueError(f"nbytes={nbytes}: expected >= 0")
    d = Path(directory)
    ins = inspect_store(d)
    data = _segments(d / "data")
    if not data:
        raise FileNotFoundError(f"{d / 'data'}: no data files")
    start, p = data[-1]
    written = max(0, ins.next_pos - start) if ins.next_pos >= start else 0
    new = max(0, written - nbytes)
    os.truncate(p, new)
    return {"file": f"data/{p.name}", "written": written, "size": new, "cut_bytes": written - new}


def flip_bit(directory: str | os.PathLike[str], pos: int, bit: int = 0) -> dict[str, int | str]:
    """Flip bit ``bit`` (0-7) of the byte at absolute data-log offset ``pos``.
    Raises ValueError when no data file holds ``pos`` or ``bit`` is outside 0-7."""
    if not 0 <= bit <= 7:
        raise ValueError(f"bit={bit}: expected 0..7")
    d = Path(directory)
    for start, p in _segments(d / "data"):
        if start <= pos < start + p.stat().st_size:
            with open(p, "r+b") as f:
                f.seek(pos - start)
                old = f.read(1)[0]
                f.seek(pos - start)
                f.write(bytes([old ^ (1 << bit)]))
            return {"file": f"data/{p.name}", "offset": pos - start, "pos": pos, "bit": bit}
    raise ValueError(f"pos={pos}: no data file in {d / 'data'} holds that offset")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dledger inspect", description=__doc__.split("\n")[0])
    ap.add_argument("directory", help="store directory (holds data/ and index/)")
    ap.add_argument("--data-file-size", type=int, default=None, help="bytes per data file")
    ap.add_argument("--json", action="store_true", help="print the inspection as JSON")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--truncate-tail", type=int, metavar="N", help="fault: drop the last N written bytes")
    g.add_argument("--flip-bit", type=int, metavar="POS", help="fault: flip a bit at data offset POS")
    ap.add_argument("--bit", type=int, default=0, help="bit (0-7) for --flip-bit")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 254 if e.code else 0
    try:
        fault: object = None
        if args.truncate_tail is not None:
            fault = truncate_tail(args.directory, args.truncate_tail)
        elif args.flip_bit is not None:
            fault = flip_bit(args.directory, args.flip_bit, args.bit)
        if fault is not None:
            print(json.dumps(fault))
            return 0
        ins = inspect_store(args.directory, args.data_file_size)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 254
    if args.json:
        print(json.dumps(asdict(ins) | {"ok": ins.ok}, indent=2))
    else:
        print(f"store {ins.directory}")
        print(f"  entries    [{ins.begin_index}, {ins.end_index}]  ({ins.entries}, end term {ins.end_term})")
        print(f"  next pos   {ins.next_pos}")
        print(f"  checkpoint {ins.checkpoint}")
        for name, info in ins.files.items():
            print(f"  {name}  size {info['size']}")
        print("  verify     " + ("OK" if ins.ok else "FAILED"))
        for prob in ins.problems:
            print(f"    {prob}")
    return 0 if ins.ok else 1


if __name__ == "__main__":
    sys.exit(main())
