#!/bin/bash
# azurite-up.sh: start Azurite's blob service on loopback for tau's tests and for trying bundles by hand.
# Installs Azurite first when missing: npm, pinned to a release that runs on Node.js 20, into .azurite/ of the checkout
# (ignored by git). Stop it with azurite-down.sh, which stops exactly the process started here, by its PID file.
#   AZURITE_PORT      blob port on 127.0.0.1 (default 10000)
#   AZURITE_LOCATION  data folder (default .azurite/data-PORT)
#   AZURITE_CERT, AZURITE_KEY  a PEM certificate and its key: serve https instead of http (default: plain http)
#   AZURITE_OAUTH     an OAuth level, "basic": also accept bearer tokens (needs AZURITE_CERT; default: keys only);
#                     clients trust the certificate with REQUESTS_CA_BUNDLE=CERT (tests/integration/test_azurite_identity.py)
# The PID is in .azurite/azurite-PORT.pid, the log in .azurite/azurite-PORT.log. Exits 0 when the service answers
# (also when this script's Azurite for PORT was already running), 1 when the port is taken by something else or
# Azurite did not start, 69 when Node.js or npm is missing. Use it with:
#   export TAU_TRUSTED_BLOB_ENDPOINTS=http://127.0.0.1:PORT
#   export AZURE_STORAGE_CONNECTION_STRING='DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...'
set -euo pipefail
AZURITE_VERSION=3.35.0  # newer releases need Node.js 22
root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/.azurite"
port=${AZURITE_PORT:-10000}
location=${AZURITE_LOCATION:-$dir/data-$port}
pidfile="$dir/azurite-$port.pid"
logfile="$dir/azurite-$port.log"
bin="$dir/node_modules/.bin/azurite-blob"
log() { printf '%s azurite-up: %s\n' "$(date +%T.%3N)" "$*" >&2; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

command -v node >/dev/null && command -v npm >/dev/null || { log "Node.js and npm are needed (apt-get install nodejs npm)"; exit 69; }
mkdir -p "$dir"
installed=$(node -p "require('$dir/node_modules/azurite/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$AZURITE_VERSION" ]; then
  log "installing azurite@$AZURITE_VERSION into $dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --no-save "azurite@$AZURITE_VERSION" >&2
fi
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && answers; then
  log "already running on 127.0.0.1:$port (pid $(cat "$pidfile"))"
  exit 0
fi
if answers; then
  log "port $port on 127.0.0.1 is taken by a process this script did not start; choose another AZURITE_PORT"
  exit 1
fi
tls=() scheme=http
if [ -n "${AZURITE_CERT:-}" ]; then
  [ -n "${AZURITE_KEY:-}" ] || { log "AZURITE_CERT needs AZURITE_KEY, the certificate's key"; exit 1; }
  tls=(--cert "$AZURITE_CERT" --key "$AZURITE_KEY") scheme=https
fi
if [ -n "${AZURITE_OAUTH:-}" ]; then
  [ "$scheme" = https ] || { log "AZURITE_OAUTH needs AZURITE_CERT and AZURITE_KEY: Azurite takes bearer tokens over https only"; exit 1; }
  tls+=(--oauth "$AZURITE_OAUTH")
fi
mkdir -p "$location"
# A plain background command, so that $! is node's own PID (the bin is a node script): azurite-down.sh stops it.
"$bin" --blobHost 127.0.0.1 --blobPort "$port" --location "$location" --silent --disableTelemetry \
  --skipApiVersionCheck "${tls[@]}" >"$logfile" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"
for _ in $(seq 1 300); do
  if answers; then log "Azurite $AZURITE_VERSION blob service on $scheme://127.0.0.1:$port (pid $pid, data $location)"; exit 0; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    log "Azurite exited before it answered; its log:"; cat "$logfile" >&2; rm -f "$pidfile"; exit 1
  fi
  sleep 0.1
done
log "Azurite did not answer on port $port within 30 s; stopping it"
kill -TERM "$pid" 2>/dev/null || true
rm -f "$pidfile"
exit 1
