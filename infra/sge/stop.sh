#!/usr/bin/env bash
# Stop the one-node Grid Engine that infra/sge/setup.sh started: sge_execd, then sge_qmaster.
#
# It asks the qmaster to shut them down (qconf -ke, qconf -km), the Grid Engine way, and
# waits until the processes have ended. Jobs still running are killed with the execd; the
# configuration and queues stay, so setup.sh starts the same cluster again quickly.
set -euo pipefail

export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine}
export SGE_CELL=${SGE_CELL:-default}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HOST=localhost
WAIT_S=${SGE_SETUP_WAIT_S:-60}

say() { echo "sge-stop: $*"; }

running() { pgrep -x "$1" >/dev/null; }
wait_gone() {
  local deadline=$((SECONDS + WAIT_S))
  while running "$1"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "sge-stop: error: $1 still running after ${WAIT_S}s" >&2
      exit 1
    fi
    sleep 0.5
  done
}

if running sge_execd; then
  qconf -ke "$HOST" >/dev/null 2>&1 || true
  wait_gone sge_execd
  say "stopped sge_execd"
else
  say "sge_execd not running"
fi
if running sge_qmaster; then
  qconf -km >/dev/null 2>&1 || true
  wait_gone sge_qmaster
  say "stopped sge_qmaster"
else
  say "sge_qmaster not running"
fi
