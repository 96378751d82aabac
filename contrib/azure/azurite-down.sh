#!/bin/bash
# azurite-down.sh: stop the Azurite that azurite-up.sh started for AZURITE_PORT (default 10000), by its PID file only
# (never pkill or killall), and wait until it has exited so the port can be used again. The data folder is kept.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
port=${AZURITE_PORT:-10000}
pidfile="$root/.azurite/azurite-$port.pid"
log() { printf '%s azurite-down: %s\n' "$(date +%T.%3N)" "$*" >&2; }
[ -s "$pidfile" ] || { log "no Azurite of ours on port $port"; exit 0; }
pid=$(cat "$pidfile")
if ! kill -0 "$pid" 2>/dev/null; then rm -f "$pidfile"; exit 0; fi
# The PID must still be our Azurite (a PID can be reused after a crash).
if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "azurite-blob .*--blobPort $port "; then
  log "pid $pid is no longer Azurite on port $port; removing the stale PID file only"; rm -f "$pidfile"; exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || { log "Azurite ($pid) stopped"; rm -f "$pidfile"; exit 0; }; sleep 0.1; done
log "Azurite ($pid) did not stop in 10 s, sending KILL"
kill -KILL "$pid" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
rm -f "$pidfile"
exit 0
