#!/bin/sh
# EpilogSlurmctld hook for tau: when a task of a tau job ends, reconcile its run (tau-observe | tau-reconcile).
#
# Install: copy this file and tau-reconcile-run (with its bin= line naming your tau installation) into a folder the
# SlurmUser can read, e.g. /etc/slurm, and set EpilogSlurmctld=/etc/slurm/tau-epilog-slurmctld.sh in slurm.conf
# (contrib/slurm/cluster-up.sh does exactly this for the test cluster). The worker is found beside this file.
# Slurm runs it on the controller as SlurmUser with SLURM_JOB_USER and SLURM_JOB_WORK_DIR set. A tau job's work
# directory is RUN/submissions/submission-NNNN (tau-submit sets --chdir), which names the run. The run is private
# to its owner (0700), so the reconcile runs as the job's user: directly when the hook already runs as that user,
# with runuser when it runs as root, and otherwise with `sudo -n`, which needs one sudoers line such as
#   slurm ALL=(ALL) NOPASSWD: /etc/slurm/tau-reconcile-run
# The hook never fails a job: it always exits 0, and does nothing for jobs that are not tau's.
work=${SLURM_JOB_WORK_DIR:-}
user=${SLURM_JOB_USER:-}
case "$work" in
  */submissions/submission-[0-9][0-9][0-9][0-9]*) ;;
  *) exit 0 ;;
esac
case "${work##*/}" in *[!A-Za-z0-9-]*) exit 0 ;; esac
run=${work%/submissions/*}
worker="$(dirname "$(readlink -f "$0")")/tau-reconcile-run"
if [ "$(id -un)" = "$user" ]; then
  "$worker" "$run"
elif [ "$(id -u)" = 0 ]; then
  runuser -u "$user" -- "$worker" "$run"
else
  sudo -n -u "$user" -- "$worker" "$run"
fi >/dev/null 2>&1
exit 0
