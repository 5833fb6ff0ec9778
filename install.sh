#!/usr/bin/env bash
# Installs dledger-chaos and what it needs on a fresh Debian machine (run as root, or with sudo).
#   ./install.sh          the tool (Debian packages for building the node image, Python packages)
#   ./install.sh --test   also what the test suite needs (browser, Spark, pytest), and the node image
set -euo pipefail
cd "$(dirname "$0")"
TEST=0
case "${1:-}" in
  "") ;;
  --test) TEST=1 ;;
  -h|--help) sed -n '2,4s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "install.sh: unknown option '$1'; expected --test, --help or nothing" >&2; exit 254 ;;
esac
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PY="${PYTHON:-python3}"

pkgs="debootstrap openssh-client iptables iproute2"
[ "$TEST" = 1 ] && pkgs="$pkgs chromium chromium-driver faketime default-jre-headless"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends $missing
fi

# an editable install leaves the tool uncompiled, and with PYTHONDONTWRITEBYTECODE set no command
# would ever write its bytecode: compile it once (every chaos command then starts ~50 ms sooner)
compile_tool() { "$PY" -m compileall -q chaos chaos_dledger dledger >/dev/null; }
if [ "$TEST" = 1 ]; then
  "$PY" -m pip install -q --disable-pip-version-check -e '.[test]'
  compile_tool
  # the node image: built once from a debootstrap rootfs and cached in the local Docker engine
  chaos cluster image
else
  "$PY" -m pip install -q --disable-pip-version-check -e .
  compile_tool
fi
