#!/bin/bash
# cluster-up.sh: install (when missing) and start a single-node Slurm with accounting (munged, MariaDB, slurmdbd,
# slurmctld, slurmd) without systemd, for tau's integration tests and `make demo SCHEDULER=slurm`. Run as root.
# Idempotent: a daemon whose pid file names a live process is left alone. FRESH=1 wipes controller state and the
# accounting database first (refused while daemons run). Stop with cluster-down.sh (by pid files only).
#   partitions: debug (default, PriorityTier=1, preemptable by requeue) and high (PriorityTier=10)
#   GPUs: the node declares 4 fake GPUs (gres/gpu over character devices made here, copies of /dev/null), which
#   Slurm really schedules: a job asking --gpus-per-task or --gres=gpu gets its own, named in CUDA_VISIBLE_DEVICES
set -euo pipefail

CLUSTER=${CLUSTER:-taucluster}
NODE=localhost
DBPASS=${DBPASS:-taudbpass}
FRESH=${FRESH:-0}
RUNDIR=/run/slurm
LOGDIR=/var/log/slurm
STATEDIR=/var/lib/slurm/slurmctld
SPOOLDIR=/var/lib/slurm/slurmd
GPUDIR=${TAU_FAKE_GPUS:-/var/lib/slurm/tau-fake-gpus}
EPILOG_CTLD=${TAU_EPILOG_CTLD:-/etc/slurm/tau-epilog-slurmctld.sh}

log() { printf '%s cluster-up: %s\n' "$(date +%T.%3N)" "$*" >&2; }
waitfor() { # waitfor SECONDS WHAT COMMAND...
  local t=$1 what=$2; shift 2
  local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then log "timed out waiting for $what"; return 1; fi
    sleep 0.2
  done
}
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 77; }

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null \
   || ! command -v munged >/dev/null; then
  log "installing slurm, munge and mariadb from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends slurm-wlm slurmctld slurmd slurm-client munge slurmdbd \
    mariadb-server >/dev/null
fi

if [ "$FRESH" = 1 ] && { running $RUNDIR/slurmctld.pid || running $RUNDIR/slurmdbd.pid || running $RUNDIR/slurmd.pid; }; then
  log "FRESH=1 but slurm daemons are running; run cluster-down.sh first"; exit 1
fi

read -r CPUS SOCKETS CORES THREADS MEM < <(slurmd -C | awk '
  /^NodeName/ { for (i=1;i<=NF;i++){ split($i,a,"="); v[a[1]]=a[2] } }
  END { print v["CPUs"], v["SocketsPerBoard"], v["CoresPerSocket"], v["ThreadsPerCore"], v["RealMemory"] }')

mkdir -p /etc/slurm "$GPUDIR"
# fake GPUs: character devices (plain files make Slurm set no GPU variables); nothing opens them
for i in 0 1 2 3; do [ -c "$GPUDIR/gpu$i" ] || { rm -f "$GPUDIR/gpu$i"; mknod -m 666 "$GPUDIR/gpu$i" c 1 3; }; done
cat > /etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=$NODE Name=gpu File=$GPUDIR/gpu[0-3]
CONF
cat > /etc/slurm/slurm.conf.new <<CONF
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job is held (Reason=BeginTime); the default 120 s makes requeue slow
AuthInfo=cred_expire=5
StateSaveLocation=$STATEDIR
SlurmdSpoolDir=$SPOOLDIR
SlurmctldPidFile=$RUNDIR/slurmctld.pid
SlurmdPidFile=$RUNDIR/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
# memory is a consumable resource, as at most sites: a job asks for DefMemPerCPU a core unless it says --mem
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MaxArraySize=1001
MaxJobCount=10000
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
OverTimeLimit=0
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
# memory is enforced without cgroups (none here): a step sampled above its --mem is killed, OUT_OF_MEMORY
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits
AccountingStorageTRES=gres/gpu
GresTypes=gpu
JobCompType=jobcomp/none
EpilogSlurmctld=$EPILOG_CTLD
NodeName=$NODE CPUs=$CPUS Boards=1 SocketsPerBoard=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS RealMemory=$MEM Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high  Nodes=$NODE Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf

cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=$LOGDIR/slurmdbd.log
PidFile=$RUNDIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
CONF
chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 600 /etc/slurm/slurmdbd.conf

# the EpilogSlurmctld hook: tau's recipe, installed beside slurm.conf (the checkout may not be readable by the slurm
# user), reconciling as the job's user through sudo with this checkout's commands
here=$(cd "$(dirname "$0")" && pwd)
install -m 755 "$here/epilog-slurmctld.sh" "$EPILOG_CTLD"
sed "s|^bin=\${TAU_BIN:-\$here/.venv/bin}|bin=\${TAU_BIN:-$(dirname "$(dirname "$here")")/.venv/bin}|" \
  "$here/tau-reconcile-run" > /etc/slurm/tau-reconcile-run
chmod 755 /etc/slurm/tau-reconcile-run
command -v sudo >/dev/null || apt-get install -y -qq --no-install-recommends sudo >/dev/null
printf 'slurm ALL=(ALL) NOPASSWD: /etc/slurm/tau-reconcile-run\n' > /etc/sudoers.d/tau-epilog
chmod 440 /etc/sudoers.d/tau-epilog

cat > /etc/mysql/mariadb.conf.d/99-tau-slurm.cnf <<'CONF'
[mysqld]
innodb_buffer_pool_size=256M
innodb_lock_wait_timeout=900
bind-address=127.0.0.1
CONF

install -d -o munge -g munge -m 0755 /run/munge
install -d -o mysql -g root -m 0755 /run/mysqld
install -d -o slurm -g slurm -m 0755 "$RUNDIR" "$LOGDIR" "$STATEDIR" "$SPOOLDIR"
if [ "$FRESH" = 1 ]; then
  find "$STATEDIR" "$SPOOLDIR" -mindepth 1 -delete
fi

[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
fi
waitfor 10 munged bash -c 'munge -n | unmunge'

[ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
if ! mariadb-admin ping >/dev/null 2>&1; then
  setsid /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid </dev/null >>$LOGDIR/mariadbd.log 2>&1 &
fi
waitfor 60 mariadb mariadb-admin ping
[ "$FRESH" = 1 ] && mariadb -e "DROP DATABASE IF EXISTS slurm_acct_db;"
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

running $RUNDIR/slurmdbd.pid || /usr/sbin/slurmdbd
waitfor 60 slurmdbd sacctmgr -n list cluster
running $RUNDIR/slurmctld.pid || /usr/sbin/slurmctld
waitfor 60 slurmctld bash -c 'scontrol ping | grep -q "is UP"'
waitfor 30 "cluster registration" bash -c "sacctmgr -n -P list cluster format=cluster | grep -qx '$CLUSTER'"
# associations are enforced, as sites enforce them: root's (made by the registration) must exist before jobs come
waitfor 30 "root's association" bash -c "sacctmgr -n -P show assoc where cluster='$CLUSTER' user=root format=user | grep -qx root"
running $RUNDIR/slurmd.pid || /usr/sbin/slurmd -N "$NODE"
waitfor 60 "node idle" bash -c "sinfo -h -n $NODE -o %T | grep -Eqx 'idle|mixed|allocated'"
log "up: $(sinfo -h -o '%P %a %T' | tr '\n' ' ')"
