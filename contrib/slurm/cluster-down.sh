#!/bin/bash
# cluster-down.sh: stop the daemons cluster-up.sh started, by their pid files only (never pkill or killall).
#   CANCEL_JOBS=0 leaves queued jobs alone (default: cancel them first so no slurmstepd outlives slurmd).
set -u
log() { printf '%s cluster-down: %s\n' "$(date +%T.%3N)" "$*" >&2; }
stop_pidfile() { # stop_pidfile NAME PIDFILE
  local name=$1 pf=$2 pid
  [ -s "$pf" ] || return 0
  pid=$(cat "$pf")
  if ! kill -0 "$pid" 2>/dev/null; then rm -f "$pf"; return 0; fi
  kill -TERM "$pid"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || { log "$name ($pid) stopped"; rm -f "$pf"; return 0; }; sleep 0.1; done
  log "$name ($pid) did not stop in 15 s, sending KILL"; kill -KILL "$pid" 2>/dev/null; rm -f "$pf"
}
if [ "${CANCEL_JOBS:-1}" = 1 ] && command -v scontrol >/dev/null && scontrol ping 2>/dev/null | grep -q 'is UP'; then
  jobs=$(squeue -h -o %A 2>/dev/null)
  # shellcheck disable=SC2086
  [ -z "$jobs" ] || scancel $jobs 2>/dev/null || true
  for _ in $(seq 1 50); do squeue -h 2>/dev/null | grep -q . || break; sleep 0.2; done
fi
stop_pidfile slurmd /run/slurm/slurmd.pid
stop_pidfile slurmctld /run/slurm/slurmctld.pid
stop_pidfile slurmdbd /run/slurm/slurmdbd.pid
stop_pidfile mariadbd /run/mysqld/mysqld.pid
stop_pidfile munged /run/munge/munged.pid
exit 0
