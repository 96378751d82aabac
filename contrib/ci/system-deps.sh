#!/bin/sh
# Installs the system packages tau's tests need, when they are missing (Debian/Ubuntu, as root).
set -eu
need=""
command -v bats >/dev/null 2>&1 || need="$need bats bats-support bats-assert"
command -v mandoc >/dev/null 2>&1 || need="$need mandoc"
command -v jq >/dev/null 2>&1 || need="$need jq"
command -v zsh >/dev/null 2>&1 || need="$need zsh"    # the shell completion tests
command -v fish >/dev/null 2>&1 || need="$need fish"
# the installed-wheel test: man finds the venv's pages from PATH; bash-completion loads the installed completion files
command -v man >/dev/null 2>&1 || need="$need man-db"
[ -f /usr/share/bash-completion/bash_completion ] || need="$need bash-completion"
# the filesystem-without-hard-links tests: a FUSE passthrough (fusepy on libfuse2; fuse3 brings /dev/fuse's tools)
command -v fusermount3 >/dev/null 2>&1 || need="$need fuse3"
ldconfig -p 2>/dev/null | grep -q 'libfuse\.so\.2' || need="$need libfuse2"
# the crash-state enumeration records each commit protocol's system calls (tests/crashstates.py)
command -v strace >/dev/null 2>&1 || need="$need strace"
# the container tests: podman with runc, and the offline build of their images (contrib/containers/test-images.sh)
command -v podman >/dev/null 2>&1 || need="$need podman"
[ -x /usr/sbin/runc ] || need="$need runc"
command -v mmdebstrap >/dev/null 2>&1 || need="$need mmdebstrap"
[ -n "$need" ] || exit 0
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing:$need; install them (apt-get install$need) or run as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get install -y -qq $need >/dev/null
