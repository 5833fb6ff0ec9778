#!/usr/bin/env python3
"""Lists every function longer than a bound (default 100 lines) in the given trees; exit 1 if any.

Usage: python3 .ci/long_functions.py [--max N] [DIR ...]   (default: chaos dledger)
A function's length is its source span (first decorator, or ``def``, to last line), nested
functions counted inside their parent too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def long_functions(root: Path, limit: int) -> list[tuple[str, int, str, int]]:
    """(file, line, qualified name, length) of each function over ``limit`` lines under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                name = prefix
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                        length = (child.end_lineno or child.lineno) - start + 1
                        if length > limit:
                            found.append((str(path), start, name, length))
                    name += "."
                stack.append((child, name))
    return sorted(found)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=100, help="longest allowed function, in lines")
    ap.add_argument("dirs", nargs="*", default=["chaos", "dledger"])
    args = ap.parse_args()
    rows = [r for d in args.dirs for r in long_functions(Path(d), args.max)]
    for path, line, name, length in rows:
        print(f"{path}:{line}: {name} is {length} lines (at most {args.max})")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
