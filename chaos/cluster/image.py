"""The node image: Debian bookworm with sshd and the fault tools, built once and cached in Docker.

No image registry is needed. When a ``debian:bookworm-slim`` image is present locally it is the base
(``docker build`` installing the packages); otherwise the root filesystem comes from
``debootstrap --variant=minbase`` against the host's configured Debian mirror and is loaded with
``docker import``. The tag is ``chaos-node:<hash of the recipe>``, so changing the recipe rebuilds
and an unchanged recipe is a cache hit. The image holds the tool's own packages only: a DB's
packages (its ``os_packages``) are installed by the OS setup, :mod:`chaos.cluster.osetup`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.errors import Refused

IMAGE_REPO = "chaos-node"
LABEL = "chaos"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = "debian:bookworm-slim"

PACKAGES = [
    "python3",
    "openssh-server",
    "iptables",
    "iproute2",
    "procps",
    "faketime",
    "libfaketime",
    "tcpdump",
    "iputils-ping",
    "ca-certificates",
    "sudo",  # the non-root SSH user (NODE_INIT) runs privileged commands through it
    "fuse3",  # lose-unfsynced: the data dir on a FUSE layer (chaos/nemesis/lazyfs_node.py)
    "python3-pyfuse3",
]

# The non-root SSH user of every node: passwordless sudo, the same authorised key as root (what a
# cluster whose operators may not log in as root looks like; ``--username chaos``). Its password
# field is ``*`` (no password), not ``!``: sshd without PAM refuses a locked account even with a key.
SUDO_USER = "chaos"

# Runs as PID 1's command in every node container: create the sudo user, authorise the cluster key
# for root and that user, give the node its own host keys (never baked into the image), then sshd in
# the foreground.
NODE_INIT = f"""#!/bin/sh
set -e
mkdir -p /run/sshd /root/.ssh
chmod 700 /root/.ssh
id {SUDO_USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/sh --password '*' {SUDO_USER}
printf '{SUDO_USER} ALL=(ALL:ALL) NOPASSWD: ALL\\n' > /etc/sudoers.d/{SUDO_USER}
chmod 440 /etc/sudoers.d/{SUDO_USER}
mkdir -p /home/{SUDO_USER}/.ssh
if [ -n "$CHAOS_AUTHORIZED_KEY" ]; then
  printf '%s\\n' "$CHAOS_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
  cp /root/.ssh/authorized_keys /home/{SUDO_USER}/.ssh/authorized_keys
fi
chown -R {SUDO_USER}:{SUDO_USER} /home/{SUDO_USER}/.ssh
chmod -R go-rwx /home/{SUDO_USER}/.ssh
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -A
exec /usr/sbin/sshd -D -e
"""

SSHD_CONFIG = """# chaos node
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
UseDNS no
MaxSessions 100
MaxStartups 100:30:200
ClientAliveInterval 10
"""

DOCKERFILE = """FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {pkgs} \\
    && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*
COPY chaos-node-init /usr/local/sbin/chaos-node-init
COPY chaos.conf /etc/ssh/sshd_config.d/chaos.conf
RUN chmod 755 /usr/local/sbin/chaos-node-init
ENV LANG=C.UTF-8
LABEL {label}=node-image
CMD ["/usr/local/sbin/chaos-node-init"]
"""


class ImageError(RuntimeError):
    """The node image could not be built; the message names the step and the cause."""


class EngineUnreachable(ImageError, Refused):
    """No Docker engine answers: the machine's setup, not a crash of the tool. A :class:`Refused`,
    so the command exits 254 with this one line, which names the engine's address and the fix."""


def recipe_hash() -> str:
    """12 hex digits identifying the build recipe (packages, init script, sshd config)."""
    h = hashlib.sha256()
    for part in (SUITE, " ".join(PACKAGES), NODE_INIT, SSHD_CONFIG, DOCKERFILE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def image_tag() -> str:
    """``chaos-node:<recipe hash>``."""
    return f"{IMAGE_REPO}:{recipe_hash()}"


def debian_mirror() -> str:
    """The Debian mirror apt is configured with (deb822 ``.sources`` or ``sources.list``)."""
    candidates: list[str] = []
    d = Path("/etc/apt/sources.list.d")
    files = sorted(d.glob("*.sources")) + sorted(d.glob("*.list")) if d.is_dir() else []
    files.append(Path("/etc/apt/sources.list"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            candidates.append(m.group(1))
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", text, re.M):
            candidates.append(m.group(1))
    for uri in candidates:
        if re.search(r"/debian/?$", uri) and "security" not in uri:
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def docker_client() -> Any:
    """A connected docker SDK client; EngineUnreachable (an ImageError) with one clear line naming
    the fix if the engine is missing."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - a dependency
        raise ImageError(f"the docker Python SDK is not installed ({e}); pip install docker") from None
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means "no engine"
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise EngineUnreachable(
            f"Docker engine not reachable at {where}: {_short(e)}; start it (e.g. `sudo systemctl start "
            "docker`), point DOCKER_HOST at a running engine, or use hosts of your own (--provider ssh "
            "--nodes HOST,...)"
        ) from None
    return client


def _short(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[-1] if s else type(e).__name__


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def ensure_image(
    client: Any | None = None, *, force: bool = False, log: Callable[[str], None] = lambda s: None
) -> str:
    """Return the node image tag, building it first if it is missing (or ``force``).

    Raises ImageError naming the failing step (engine, debootstrap, import).
    """
    client = client or docker_client()
    tag = image_tag()
    if not force and image_exists(client, tag):
        return tag
    t0 = time.monotonic()
    if image_exists(client, BASE_IMAGE):
        log(f"building {tag} from {BASE_IMAGE}")
        _build_from_base(client, tag)
    else:
        log(f"building {tag} from a debootstrap rootfs ({SUITE}, {debian_mirror()})")
        _build_from_debootstrap(client, tag, log)
    log(f"built {tag} in {time.monotonic() - t0:.0f}s")
    return tag


def _build_from_base(client: Any, tag: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files = {
            "Dockerfile": DOCKERFILE.format(base=BASE_IMAGE, pkgs=" ".join(PACKAGES), label=LABEL),
            "chaos-node-init": NODE_INIT,
            "chaos.conf": SSHD_CONFIG,
        }
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    try:
        client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, labels={LABEL: "node-image"})
    except Exception as e:  # noqa: BLE001
        raise ImageError(f"docker build of {tag} from {BASE_IMAGE} failed: {_short(e)}") from None


def _build_from_debootstrap(client: Any, tag: str, log: Callable[[str], None]) -> None:
    if os.geteuid() != 0:
        raise ImageError(
            "building the node image with debootstrap needs root (run `sudo chaos cluster image`)"
        )
    if not shutil.which("debootstrap"):
        raise ImageError(
            "debootstrap is not installed (apt-get install debootstrap), and no debian:bookworm-slim"
        )
    work = Path(tempfile.mkdtemp(prefix="chaos-rootfs-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    rootfs = work / "rootfs"
    try:
        cmd = [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            SUITE,
            str(rootfs),
            debian_mirror(),
        ]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-4:])
            raise ImageError(f"debootstrap failed (exit {proc.returncode}): {tail}")
        log(f"debootstrap done in {time.monotonic() - t0:.0f}s; configuring rootfs")
        t0 = time.monotonic()
        _configure_rootfs(rootfs)
        log("importing rootfs into Docker")
        changes = [
            'CMD ["/usr/local/sbin/chaos-node-init"]',
            "ENV LANG=C.UTF-8",
            f"LABEL {LABEL}=node-image",
        ]
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert tar.stdout is not None
        repo, _, version = tag.partition(":")
        try:
            client.api.import_image_from_stream(tar.stdout, repository=repo, tag=version, changes=changes)
        except Exception as e:  # noqa: BLE001
            tar.kill()
            raise ImageError(f"docker import of the rootfs failed: {_short(e)}") from None
        finally:
            err = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
            rc = tar.wait()
        if rc != 0:
            raise ImageError(f"tar of the rootfs failed (exit {rc}): {err.strip()[-300:]}")
        if not image_exists(client, tag):
            raise ImageError(f"docker import finished but {tag} is not in the engine")
        log(f"imported in {time.monotonic() - t0:.0f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _configure_rootfs(rootfs: Path) -> None:
    init = rootfs / "usr/local/sbin/chaos-node-init"
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(NODE_INIT)
    init.chmod(0o755)
    conf = rootfs / "etc/ssh/sshd_config.d/chaos.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(SSHD_CONFIG)
    # host keys are made per container at start; the apt cache only costs space
    for p in (rootfs / "etc/ssh").glob("ssh_host_*"):
        p.unlink()
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_Packages"):
        for p in rootfs.glob(pattern):
            p.unlink()
    (rootfs / "etc/hostname").write_text("node\n")
    # no service starts at package install time inside the image
    policy = rootfs / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)


def remove_image(client: Any | None = None) -> list[str]:
    """Remove every node image (:data:`IMAGE_REPO`); returns the removed tags."""
    client = client or docker_client()
    removed = []
    for img in client.images.list(name=IMAGE_REPO):
        for t in img.tags:
            client.images.remove(t, force=True)
            removed.append(t)
    return removed
