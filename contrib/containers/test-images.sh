#!/bin/bash
# Builds, when missing, the podman images the container tests run, offline (no registry: Debian's mirrors and PyPI
# only), as root on Debian/Ubuntu:
#   localhost/tau-test-client   Debian bookworm (mmdebstrap's essential variant, python3) with tau and its runtime
#                               dependencies in the venv /opt/tau, whose bin/ comes first on PATH
#   localhost/tau-test-service  the same with one more layer and the label tau.test=service: another digest, for a
#                               model service that runs in its own image
#   an image file               `podman save --format oci-archive` of tau-test-client, for the tests of an image file
#                               pinned by its sha256. Its layers are gzipped, so the manifest in it has another digest
#                               than tau-test-client's (the same config, so `podman load` gives the same image Id), and
#                               a new save has another sha256 (the archive's mtimes): the file is saved once per image
# Every image carries the label tau.test.key=KEY, the sha256 of the checkout's taulib, share and pyproject.toml (the
# files git tracks or would add) and of this script: an image with the current KEY is kept, so a second call takes a
# second. The cache folder ${TAU_TEST_IMAGES_DIR:-/var/tmp/tau-test-images} (0700) holds the Debian root tarball (keyed
# by this script alone) and, under KEY/, the wheelhouse and the image file. A stale image or file is replaced, and the
# one it replaces is kept for one generation (an image as NAME:previous, still found by its digest), for a test
# process that asked before the checkout changed. Concurrent calls wait for each other (a lock in that folder).
# It prints one JSON object on stdout, everything else goes to stderr:
#   {"client": {"ref": "localhost/tau-test-client@sha256:HEX", "digest": "sha256:HEX"}, "service": {...},
#    "file": {"path": "/abs/....tar", "sha256": "HEX"}}
# podman runs with runc (crun refuses this kind of machine's hybrid cgroups) and `podman run` with the ulimits below
# (raising them is refused): tests/containers.py has the same PODMAN and RUNTIME_ARGS.
set -euo pipefail

exec 3>&1 1>&2    # fd 3 is the JSON's; anything a command prints goes to stderr

SELF=$(readlink -f -- "${BASH_SOURCE[0]}")
ROOT=$(cd -- "$(dirname -- "$SELF")/../.." && pwd)
DIR=${TAU_TEST_IMAGES_DIR:-/var/tmp/tau-test-images}
PYTHON=${TAU_TEST_IMAGES_PYTHON:-$ROOT/.venv/bin/python}
CLIENT=localhost/tau-test-client
SERVICE=localhost/tau-test-service
BASE=localhost/tau-test-base    # the imported root filesystem, kept so that a change to taulib skips mmdebstrap
SUITE=bookworm
MIRRORS=("deb http://deb.debian.org/debian $SUITE main"
         "deb http://deb.debian.org/debian $SUITE-updates main"
         "deb http://deb.debian.org/debian-security $SUITE-security main")
IMAGE_PATH=/opt/tau/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PODMAN=(podman --runtime /usr/sbin/runc)
RUNTIME_ARGS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

log() { printf 'test-images: %s\n' "$*"; }

# -- the Debian packages ---------------------------------------------------------------------------------------------
need=""
command -v podman >/dev/null 2>&1 || need="$need podman"
[ -x /usr/sbin/runc ] || need="$need runc"
command -v mmdebstrap >/dev/null 2>&1 || need="$need mmdebstrap"
if [ -n "$need" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "test-images: missing:$need; install them (apt-get install$need) or run as root" >&2
    exit 1
  fi
  log "installing$need"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq $need >/dev/null
fi

# -- the key ---------------------------------------------------------------------------------------------------------
# every file of the wheel's sources that git tracks or would add, by its content (a symbolic link by its target), and
# this script's text; the wheel's own hash changes with every build (timestamps)
key_lines() {
  local f files=()
  while IFS= read -r -d '' f; do
    if [ -L "$f" ]; then
      printf 'link %s %s\n' "$f" "$(readlink -- "$f")"
    elif [ -f "$f" ]; then
      files+=("$f")
    else
      printf 'gone %s\n' "$f"
    fi
  done < <(git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- taulib share pyproject.toml | sort -zu)
  [ "${#files[@]}" = 0 ] || sha256sum -- "${files[@]}"
  printf 'script %s\n' "$SCRIPT_HASH"
}
SCRIPT_HASH=$(sha256sum <"$SELF" | cut -c1-64)
KEY=$(cd "$ROOT" && key_lines | sha256sum | cut -c1-64)

install -d -m 0700 "$DIR"
exec 9>"$DIR/.lock"
flock 9

WORK=$DIR/$KEY
FILE=$WORK/tau-test-client.oci.tar
META=$FILE.meta    # "IMAGE-ID SHA256": the client image the file was saved from, and the file's sha256

# the value of an image's label, empty when the image or the label is missing
label() { "${PODMAN[@]}" image inspect --format "{{index .Labels \"$2\"}}" "$1" 2>/dev/null || true; }
image_id() { "${PODMAN[@]}" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

client_ok() { [ "$(label "$CLIENT" tau.test.key)" = "$KEY" ]; }
service_ok() {
  [ "$(label "$SERVICE" tau.test.key)" = "$KEY" ] && [ "$(label "$SERVICE" tau.test.client)" = "$(image_id "$CLIENT")" ]
}
file_ok() { [ -f "$FILE" ] && [ -f "$META" ] && [ "$(cut -d' ' -f1 "$META")" = "$(image_id "$CLIENT")" ]; }

CONTAINERS=()
cleanup() {
  local c
  for c in "${CONTAINERS[@]}"; do "${PODMAN[@]}" rm -f "$c" >/dev/null 2>&1 || true; done
  if [ -n "${SCRATCH:-}" ]; then rm -rf -- "$SCRATCH"; fi
}
trap cleanup EXIT

# -- build what is missing -------------------------------------------------------------------------------------------
if ! { client_ok && service_ok && file_ok; }; then
  started=$SECONDS
  SCRATCH=$(mktemp -d "$DIR/.build.XXXXXX")
  mkdir -p "$WORK"
  # A process that asked before this call may still use the images and the file it was given: the ones replaced
  # here stay one generation (the images as NAME:previous, found by their digest as before), the ones before go.
  old_key=$(label "$CLIENT" tau.test.key)
  previous_key=$(label "$CLIENT:previous" tau.test.key)
  for old in "$DIR"/*; do
    case "$old" in
      "$WORK" | "$DIR/$old_key" | "$DIR/$previous_key" | "$DIR/rootfs-$SCRIPT_HASH.tar") ;;
      *) rm -rf -- "$old" ;;
    esac
  done
  declare -A latest previous
  for name in "$SERVICE" "$CLIENT" "$BASE"; do
    latest[$name]=$(image_id "$name")
    previous[$name]=$(image_id "$name:previous")
  done

  if ! client_ok; then
    # the Debian root filesystem (in the background, while the wheelhouse is made)
    rootfs=$DIR/rootfs-$SCRIPT_HASH.tar
    debootstrap_pid=""
    if [ "$(label "$BASE" tau.test.base)" != "$SCRIPT_HASH" ] && [ ! -f "$rootfs" ]; then
      log "mmdebstrap $SUITE -> $rootfs"
      # libstdc++6: pyarrow's manylinux wheel links the system's (the essential variant has none)
      mmdebstrap --quiet --variant=essential --include=python3,python3-venv,ca-certificates,libstdc++6 \
        "$SUITE" "$SCRATCH/rootfs.tar" "${MIRRORS[@]}" </dev/null >"$SCRATCH/mmdebstrap.log" 2>&1 &
      debootstrap_pid=$!
    fi

    # the wheelhouse: tau's wheel from the checkout's files (copied, so that the build leaves nothing in the
    # checkout) and its runtime dependencies for CPython 3.11 on glibc 2.36 x86_64 (Debian 12's python3)
    wheels=$WORK/wheels
    if [ ! -f "$wheels/.complete" ]; then
      log "wheelhouse -> $wheels"
      rm -rf -- "$wheels"
      mkdir -p "$SCRATCH/src" "$wheels"
      (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- pyproject.toml taulib share man |
        while IFS= read -r -d '' f; do
          if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
        done | tar --null -T - -cf -) | tar -xf - -C "$SCRATCH/src"
      "$PYTHON" -m pip wheel -q --no-deps -w "$wheels" "$SCRATCH/src"
      platforms=()
      for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
      platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
      "$PYTHON" -m pip download -q -d "$wheels" --only-binary=:all: --python-version 3.11 --implementation cp \
        --abi cp311 --abi abi3 --abi none "${platforms[@]}" "$wheels"/tau-*.whl
      touch "$wheels/.complete"
    fi

    if [ -n "$debootstrap_pid" ]; then
      if ! wait "$debootstrap_pid"; then
        tail -n 30 "$SCRATCH/mmdebstrap.log"
        echo "test-images: mmdebstrap failed (its log's end is above)" >&2
        exit 1
      fi
      mv -- "$SCRATCH/rootfs.tar" "$rootfs"
    fi
    if [ "$(label "$BASE" tau.test.base)" != "$SCRIPT_HASH" ]; then
      log "podman import -> $BASE"
      "${PODMAN[@]}" import -q --change "LABEL tau.test.base=$SCRIPT_HASH" --change "ENV PATH=$IMAGE_PATH" \
        "$rootfs" "$BASE" >/dev/null
    fi

    log "installing tau into /opt/tau -> $CLIENT"
    build="tau-test-images-client-$$"
    CONTAINERS+=("$build")
    "${PODMAN[@]}" run --name "$build" --network none "${RUNTIME_ARGS[@]}" -v "$wheels:/wheels:ro" "$BASE" \
      sh -c 'python3 -m venv /opt/tau &&
             /opt/tau/bin/pip install -q --disable-pip-version-check --no-cache-dir --no-index \
               --find-links /wheels tau &&
             /opt/tau/bin/python -c "import click, orjson, portalocker, pyarrow.parquet, azure.storage.blob" &&
             /opt/tau/bin/python -c "import kubernetes.client, requests, urllib3, taulib" &&
             /opt/tau/bin/tau-collect --help >/dev/null'
    "${PODMAN[@]}" commit -q --change "ENV PATH=$IMAGE_PATH" --change 'CMD ["/bin/sh"]' \
      --change "LABEL tau.test.key=$KEY" "$build" "$CLIENT" >/dev/null
  fi

  client_id=$(image_id "$CLIENT")
  if ! service_ok; then
    log "$CLIENT -> $SERVICE"
    build="tau-test-images-service-$$"
    CONTAINERS+=("$build")
    "${PODMAN[@]}" create --name "$build" --network none "${RUNTIME_ARGS[@]}" "$client_id" true >/dev/null
    "${PODMAN[@]}" commit -q --change 'CMD ["/bin/sh"]' --change 'LABEL tau.test=service' \
      --change "LABEL tau.test.client=$client_id" --change "LABEL tau.test.key=$KEY" "$build" "$SERVICE" >/dev/null
  fi

  if ! file_ok; then
    log "podman save --format oci-archive $CLIENT -> $FILE"
    rm -f -- "$FILE" "$META"
    "${PODMAN[@]}" save -q --format oci-archive -o "$SCRATCH/client.tar" "$CLIENT"
    printf '%s %s\n' "$client_id" "$(sha256sum <"$SCRATCH/client.tar" | cut -c1-64)" >"$SCRATCH/meta"
    mv -- "$SCRATCH/client.tar" "$FILE"
    mv -- "$SCRATCH/meta" "$META"
  fi

  for name in "$SERVICE" "$CLIENT"; do
    now=$(image_id "$name")
    if [ -n "${latest[$name]}" ] && [ "${latest[$name]}" != "$now" ]; then
      "${PODMAN[@]}" tag "${latest[$name]}" "$name:previous"
      if [ -n "${previous[$name]}" ] && [ "${previous[$name]}" != "${latest[$name]}" ]; then
        "${PODMAN[@]}" image rm "${previous[$name]}" >/dev/null 2>&1 || true    # unless a container still uses it
      fi
    fi
  done
  # the replaced base once no image is built on it, what a failed build left
  "${PODMAN[@]}" image prune -f --filter label=tau.test.base >/dev/null
  log "built in $((SECONDS - started)) s"
fi

# -- the answer ------------------------------------------------------------------------------------------------------
json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}
image_json() {
  local digest
  digest=$("${PODMAN[@]}" image inspect --format '{{.Digest}}' "$1")
  case "$digest" in
    sha256:????????????????????????????????????????????????????????????????) ;;
    *) echo "test-images: $1 has no sha256 digest ($digest)" >&2; exit 1 ;;
  esac
  if ! "${PODMAN[@]}" image inspect "$1@$digest" >/dev/null; then
    echo "test-images: $1@$digest is not found by its digest" >&2
    exit 1
  fi
  printf '{"ref": %s, "digest": %s}' "$(json_string "$1@$digest")" "$(json_string "$digest")"
}
client_json=$(image_json "$CLIENT")
service_json=$(image_json "$SERVICE")
file_sha=$(cut -d' ' -f2 "$META")
printf '{"client": %s, "service": %s, "file": {"path": %s, "sha256": %s}}\n' "$client_json" "$service_json" \
  "$(json_string "$FILE")" "$(json_string "$file_sha")" >&3
