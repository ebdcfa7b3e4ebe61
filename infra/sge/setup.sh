#!/usr/bin/env bash
# A one-node Grid Engine for the integration tests of the sge provider (providers/sge.py).
#
# Run as root on Debian 12 (bookworm); safe to run again (each step checks before it acts):
#
#   sudo infra/sge/setup.sh        # install, configure, start; prints what it did
#   infra/sge/stop.sh              # stop the two daemons again
#
# What it does:
#   1. installs gridengine-master, -exec and -client from Debian, with the debconf answers
#      preseeded (configure the cell automatically, cell "default", master "localhost"), and
#      without letting the packages start the daemons (we start them ourselves, below);
#   2. names this host "localhost" for Grid Engine (common/host_aliases, act_qmaster), so
#      the cluster does not depend on how the machine's hostname resolves;
#   3. starts sge_qmaster if it is not running and waits until it answers;
#   4. sets min_uid and min_gid to 0 in the global configuration (the tests run as root,
#      and Grid Engine refuses jobs of uids below min_uid);
#      It also makes the scheduler run every 2 s and on each submission (default: 15 s);
#   5. makes localhost an exec host and a submit host, then starts sge_execd (after the
#      configuration change, which it reads at start-up);
#   6. creates the queues all.q (the default), as_small.q and as_large.q (4 slots each,
#      host localhost): two queues, so two machine types can map to two queues;
#   7. waits until `qstat -f` shows the queues on localhost up (no "u"nknown state).
#
# The daemons stay running (services for the tests). Clients need SGE_ROOT and SGE_CELL:
#   export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
set -euo pipefail

export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine}
export SGE_CELL=${SGE_CELL:-default}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HOST=localhost
QUEUES=(all.q as_small.q as_large.q)
SLOTS=4
COMMON=$SGE_ROOT/$SGE_CELL/common
WAIT_S=${SGE_SETUP_WAIT_S:-120}

say() { echo "sge-setup: $*"; }
die() {
  echo "sge-setup: error: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts daemons)"

work=$(mktemp -d)
policy_added=""
cleanup() {
  rm -rf "$work"
  if [ -n "$policy_added" ]; then rm -f /usr/sbin/policy-rc.d; fi
}
trap cleanup EXIT

# --- 1. packages ------------------------------------------------------------------------
installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
PACKAGES=(gridengine-master gridengine-exec gridengine-client)
need=()
for p in "${PACKAGES[@]}"; do installed "$p" || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  debconf-set-selections <<EOF
gridengine-common shared/gridengineconfig boolean true
gridengine-common shared/gridenginecell string $SGE_CELL
gridengine-common shared/gridenginemaster string $HOST
gridengine-master shared/gridengineconfig boolean true
gridengine-master shared/gridenginecell string $SGE_CELL
gridengine-exec shared/gridenginemaster string $HOST
gridengine-client shared/gridenginemaster string $HOST
EOF
  # The packages' init scripts would start the daemons before the host is configured;
  # a policy-rc.d that says "no" (exit 101) keeps them still, unless one is already there.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    policy_added=yes
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${need[@]}" >"$work/apt.log" 2>&1; then
    say "apt-get install failed; updating the package lists and trying again"
    apt-get update -q >"$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; die "apt-get update failed"; }
    apt-get install -y -q --no-install-recommends "${need[@]}" >"$work/apt.log" 2>&1 ||
      { tail -n 40 "$work/apt.log" >&2; die "apt-get install ${need[*]} failed"; }
  fi
  if [ -n "$policy_added" ]; then
    rm -f /usr/sbin/policy-rc.d
    policy_added=""
  fi
else
  say "packages already installed: ${PACKAGES[*]}"
fi
[ -f "$COMMON/bootstrap" ] ||
  die "$COMMON/bootstrap is missing: the cell was not initialised (debconf answers?)"

# --- 2. host names ----------------------------------------------------------------------
write_if_changed() { # file content
  if [ "$(cat "$1" 2>/dev/null)" != "$2" ]; then
    printf '%s\n' "$2" >"$1"
    chown sgeadmin:sgeadmin "$1"
    chmod 644 "$1"
    say "wrote $1: $2"
  fi
}
write_if_changed "$COMMON/host_aliases" "$HOST $(hostname)"
write_if_changed "$COMMON/act_qmaster" "$HOST"

# --- 3. qmaster -------------------------------------------------------------------------
running() { pgrep -x "$1" >/dev/null; }
wait_for() { # description command...
  local what=$1
  shift
  local deadline=$((SECONDS + WAIT_S))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out after ${WAIT_S}s waiting for $what"
    sleep 0.5
  done
}
qmaster_up() { qconf -sconf global >/dev/null 2>&1; }
# A qmaster process that does not answer is starting or shutting down: wait until it
# answers or ends (then start a new one).
deadline=$((SECONDS + WAIT_S))
while running sge_qmaster && ! qmaster_up; do
  [ $SECONDS -lt $deadline ] || die "sge_qmaster runs but does not answer after ${WAIT_S}s"
  sleep 0.5
done
if running sge_qmaster; then
  say "sge_qmaster already running"
else
  say "starting sge_qmaster"
  /usr/sbin/sge_qmaster
fi
wait_for "sge_qmaster to answer" qconf -sconf global

# --- 4. global configuration ------------------------------------------------------------
qconf -sconf global >"$work/global.orig"
sed -E 's/^(min_uid|min_gid)([[:space:]]+).*/\1\20/' "$work/global.orig" >"$work/global"
config_changed=""
if ! cmp -s "$work/global.orig" "$work/global"; then
  (cd "$work" && qconf -Mconf ./global >/dev/null)
  config_changed=yes
  say "set min_uid and min_gid to 0 in the global configuration"
fi

# The scheduler's default runs every 15 s; a test waits for jobs to start, so schedule
# every 2 s, and also on each submission and job end (flush_*_sec 1).
qconf -ssconf >"$work/sched.orig"
sed -E -e 's/^(schedule_interval[[:space:]]+).*/\10:0:2/' \
  -e 's/^(flush_submit_sec|flush_finish_sec)([[:space:]]+).*/\1\21/' \
  "$work/sched.orig" >"$work/sched"
if ! cmp -s "$work/sched.orig" "$work/sched"; then
  qconf -Msconf "$work/sched" >/dev/null
  say "scheduler: schedule_interval 0:0:2, flush_submit_sec 1, flush_finish_sec 1"
fi

# --- 5. exec host, submit host, execd ---------------------------------------------------
if ! qconf -se "$HOST" >/dev/null 2>&1; then
  cat >"$work/exechost" <<EOF
hostname              $HOST
load_scaling          NONE
complex_values        NONE
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
EOF
  qconf -Ae "$work/exechost" >/dev/null
  say "added exec host $HOST"
fi
if ! qconf -ss 2>/dev/null | grep -qx "$HOST"; then
  qconf -as "$HOST" >/dev/null
  say "added submit host $HOST"
fi
if ! qconf -sh 2>/dev/null | grep -qx "$HOST"; then
  qconf -ah "$HOST" >/dev/null
  say "added admin host $HOST"
fi
if running sge_execd && [ -n "$config_changed" ]; then
  say "restarting sge_execd to read the new configuration"
  qconf -ke "$HOST" >/dev/null
  wait_for "sge_execd to stop" sh -c '! pgrep -x sge_execd'
fi
if running sge_execd; then
  say "sge_execd already running"
else
  say "starting sge_execd"
  /usr/sbin/sge_execd
fi

# --- 6. queues --------------------------------------------------------------------------
for q in "${QUEUES[@]}"; do
  if qconf -sq "$q" >/dev/null 2>&1; then
    say "queue $q exists"
    continue
  fi
  cat >"$work/$q" <<EOF
qname                 $q
hostlist              $HOST
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               NONE
rerun                 FALSE
slots                 $SLOTS
tmpdir                /tmp
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      posix_compliant
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
EOF
  qconf -Aq "$work/$q" >/dev/null
  say "added queue $q ($SLOTS slots on $HOST)"
done

# --- 7. wait until the queues are up ----------------------------------------------------
# `qstat -f` prints one line per queue instance: name, type, slots, load, arch, and a
# sixth column of states only when something is wrong ("au": execd not heard from yet).
queues_up() {
  local out
  out=$(qstat -f) || return 1
  for q in "${QUEUES[@]}"; do
    echo "$out" | awk -v qi="$q@$HOST" '$1 == qi && NF == 5 && $4 != "-NA-" { ok = 1 } END { exit !ok }' ||
      return 1
  done
}
wait_for "the queues on $HOST to come up (qstat -f)" queues_up
say "ready: SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL, queues ${QUEUES[*]} on $HOST"
qstat -f
