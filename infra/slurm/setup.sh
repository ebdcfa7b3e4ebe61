#!/usr/bin/env bash
# A one-node Slurm for the integration tests of the slurm provider (providers/slurm.py).
#
# Run as root on Debian 12 (bookworm) after installing slurmctld, slurmd, slurm-client and
# munge (tests/run.sh does, with the packages' init scripts blocked); safe to run again
# (each step checks before it acts):
#
#   sudo infra/slurm/setup.sh      # configure, start; prints what it did
#
# What it does:
#   1. writes /etc/slurm/slurm.conf from slurm.conf.in beside this script: this host's
#      short name as the only node (CPUs=$SLURM_CPUS, default 16, more than the machine
#      has), partitions debug (default), as_small and as_large, no accounting database;
#      it refuses to overwrite a slurm.conf it did not write;
#   2. creates the munge key if it is missing and starts munged (as user munge) unless
#      munge already answers;
#   3. starts slurmctld, then slurmd, each only if its pid file names a live process
#      or `scontrol ping` / the node's state shows it runs (never kills or restarts a
#      daemon; a changed slurm.conf is applied with `scontrol reconfigure`);
#   4. waits until `sinfo` shows the node idle (or mixed/allocated: jobs of a run).
set -euo pipefail

export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HERE=$(cd "$(dirname "$0")" && pwd)
HOST=$(hostname -s)
CPUS=${SLURM_CPUS:-16}
CONF=/etc/slurm/slurm.conf
STATE=/var/spool/slurm-autoscaler
RUN=/run/slurm-autoscaler
LOG=/var/log/slurm-autoscaler
MARKER="# autoscaler test cluster"
WAIT_S=${SLURM_SETUP_WAIT_S:-120}

say() { echo "slurm-setup: $*"; }
die() {
  echo "slurm-setup: error: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (it writes /etc/slurm and starts daemons)"
for bin in slurmctld slurmd munged sinfo scontrol; do
  command -v "$bin" >/dev/null ||
    die "$bin missing: apt-get install slurmctld slurmd slurm-client munge (tests/run.sh does)"
done

wait_for() { # description command...
  local what=$1
  shift
  local deadline=$((SECONDS + WAIT_S))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out after ${WAIT_S}s waiting for $what"
    sleep 0.5
  done
}
alive() { # pid file: whether it names a live process
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# --- 1. slurm.conf ----------------------------------------------------------------------
mkdir -p "$STATE/ctld" "$STATE/d" "$RUN" "$LOG" /etc/slurm
conf=$(sed -e "s/@HOST@/$HOST/g" -e "s/@CPUS@/$CPUS/g" -e "s|@STATE@|$STATE|g" \
  -e "s|@RUN@|$RUN|g" -e "s|@LOG@|$LOG|g" "$HERE/slurm.conf.in")
conf_changed=""
if [ -e "$CONF" ] && ! head -n 1 "$CONF" | grep -qF "$MARKER"; then
  die "$CONF exists and was not written by this script: not touching it"
fi
if [ "$(cat "$CONF" 2>/dev/null)" != "$conf" ]; then
  printf '%s\n' "$conf" >"$CONF"
  chmod 644 "$CONF"
  conf_changed=yes
  say "wrote $CONF (node $HOST, $CPUS CPUs)"
fi

# --- 2. munge ---------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 600 /etc/munge/munge.key
  say "created the munge key"
fi
munge_ok() { munge -n </dev/null | unmunge >/dev/null; }
if munge_ok 2>/dev/null; then
  say "munged already running"
else
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged
  wait_for "munged to answer" munge_ok
fi

# --- 3. slurmctld, slurmd ---------------------------------------------------------------
ctld_up() { scontrol ping | grep -q "is UP"; }
if alive "$RUN/slurmctld.pid" || ctld_up 2>/dev/null; then
  say "slurmctld already running"
  if [ -n "$conf_changed" ]; then
    scontrol reconfigure
    say "slurmctld: reconfigured"
  fi
else
  say "starting slurmctld"
  slurmctld
fi
wait_for "slurmctld to answer (scontrol ping)" ctld_up
if alive "$RUN/slurmd.pid"; then
  say "slurmd already running"
else
  say "starting slurmd"
  slurmd
fi

# --- 4. the node ------------------------------------------------------------------------
node_ready() {
  local state
  state=$(sinfo -h -n "$HOST" -o %T | head -n 1)
  case "$state" in
  idle* | mixed* | allocated*) return 0 ;;
  *) return 1 ;;
  esac
}
wait_for "node $HOST to be idle (sinfo)" node_ready
say "ready: node $HOST, partitions debug, as_small, as_large"
sinfo
