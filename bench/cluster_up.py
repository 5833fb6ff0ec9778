"""Time `chaos cluster up` as on a fresh machine: node image built from scratch, then 5 nodes up.

Usage: python bench/cluster_up.py [--nodes 5] [--keep]

The image is built under a scratch tag (``chaos-node:bench``) so clusters that other runs use
keep their image; the build is the same recipe as ``chaos cluster image`` (debootstrap + docker
import, or a local debian:bookworm-slim). Prints the build, up, no-op up, DLedger setup and down times.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from chaos.cluster import image as img
from chaos.cluster.docker import DockerProvider
from chaos.control.ssh import Control
from chaos_dledger.db import DLedgerDB


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the scratch image")
    a = ap.parse_args()
    os.environ["CHAOS_HOME"] = tempfile.mkdtemp(prefix="chaos-bench-")
    client = img.docker_client()
    tag = f"{img.IMAGE_REPO}:bench"
    if img.image_exists(client, tag):
        client.images.remove(tag, force=True)
    t0 = time.monotonic()
    if img.image_exists(client, img.BASE_IMAGE):
        img._build_from_base(client, tag)
    else:
        img._build_from_debootstrap(client, tag, print)
    t_build = time.monotonic() - t0
    p = DockerProvider(a.nodes, name="bench", image=tag, log=print)
    try:
        t1 = time.monotonic()
        nodes = p.up()
        t_up = time.monotonic() - t1
        t2 = time.monotonic()
        p.up()
        t_noop = time.monotonic() - t2
        with Control(nodes) as ctl:
            t3 = time.monotonic()
            DLedgerDB().setup(ctl)
            t_db = time.monotonic() - t3
    finally:
        t4 = time.monotonic()
        p.down()
        t_down = time.monotonic() - t4
        if not a.keep:
            client.images.remove(tag, force=True)
    print(f"image build (fresh)      {t_build:7.1f} s")
    print(f"cluster up ({a.nodes} nodes)     {t_up:7.1f} s")
    print(f"fresh-machine total      {t_build + t_up:7.1f} s")
    print(f"up on a live cluster     {t_noop:7.1f} s")
    print(f"DLedger setup (fresh)    {t_db:7.1f} s")
    print(f"cluster down             {t_down:7.1f} s")


if __name__ == "__main__":
    main()
