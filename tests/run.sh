#!/usr/bin/env bash
# Install everything the tests need and run them: lint, types, unit and integration tests.
# Used as is by CI (.ci/run). Under CI=true a service an integration test needs must run,
# never be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's header gives the seconds since the start (SECONDS), for the CI log.
phase() { echo "== $* (at ${SECONDS}s)"; }

# The services are installed and started in the background while the virtual environment
# is made; the unit tests and mypy, which need no service, start as soon as it is ready,
# beside the rest of the set-up (package installs mostly wait on disk and network). The
# set-up's output is printed when it is done, before the integration tests.
phase "python environment (services set up beside it)"
# Services the integration tests use. sshd and the moto server are started by the tests
# themselves (loopback ports, test keys); the Debian packages (and chromium, for the
# status page) must be here. Grid Engine runs as a one-node cluster, set up and started
# here (infra/sge/setup.sh is idempotent).
# Packages are installed without letting their init scripts start anything: a policy-rc.d
# that says "no" (exit 101) is put in place for the install, unless the machine has one.
# The tests start their own sshd on loopback; a system sshd, if the machine runs one, is
# never stopped.
install_packages() {
  local added="" rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    added=yes
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; } || rc=$?
  if [ -n "$added" ]; then rm -f /usr/sbin/policy-rc.d; fi
  return "$rc"
}
set_up_services() {
  if [ "$(id -u)" = 0 ]; then
    [ -x /usr/sbin/sshd ] || install_packages openssh-server
    # The status page is tested in a real headless browser (Playwright drives the system
    # chromium; `playwright install` is never run).
    [ -x /usr/bin/chromium ] || install_packages chromium
    # promtool checks and fires the Prometheus alerting rules infra/ ships.
    [ -x /usr/bin/promtool ] || install_packages prometheus
    # libfaketime sets a served service's wall clock (a project's month turning over).
    [ -x /usr/bin/faketime ] || install_packages faketime
    bash infra/sge/setup.sh
    # A one-node Slurm (munged, slurmctld, slurmd), started unless already running.
    [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/bin/sbatch ] &&
      [ -x /usr/sbin/munged ] || install_packages slurmctld slurmd slurm-client munge
    bash infra/slurm/setup.sh
  elif [ "${CI:-}" = true ]; then
    echo "error: CI=true needs root to install sshd, chromium, Grid Engine and Slurm" >&2
    exit 1
  else
    echo "not root: tests that need sshd, chromium, Grid Engine or Slurm skip where these are missing"
  fi
}
services_log=$(mktemp)
(set_up_services) >"$services_log" 2>&1 &
services_pid=$!
unit_pid=""
mypy_pid=""
at_exit() {
  # only the processes started here, by their ids; a package install is never cut short
  for pid in "$unit_pid" "$mypy_pid"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  done
  if [ -n "$services_pid" ]; then wait "$services_pid" 2>/dev/null || true; fi
}
trap at_exit EXIT
export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine} SGE_CELL=${SGE_CELL:-default}

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# An editable install leaves our modules uncompiled, and with PYTHONDONTWRITEBYTECODE
# set (as on our machines) every process the tests start (daemons, CLI calls: hundreds)
# compiles them again: about 0.2 s of CPU each. Compiled once here instead (every
# folder but the hidden ones: .venv, .git).
.venv/bin/python -m compileall -q -x '/\.' .

phase ruff
.venv/bin/ruff check .
.venv/bin/ruff format --check .

# pytest exits 5 when it collects nothing: for the unit tests that is a failure (they
# must exist); for the integration tests it only means there are none yet.
run_pytest() {
  local what=$1 empty_ok=$2
  shift 2
  phase "pytest: $what"
  set +e
  .venv/bin/python -m pytest "$@"
  local rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then
    if [ "$empty_ok" = yes ]; then
      echo "no $what tests collected"
      return 0
    fi
    echo "error: no $what tests were collected" >&2
    return 1
  fi
  return "$rc"
}

# mypy checks the types beside the tests (about 25 s of CPU on a clean clone); its
# output is printed, and its failure fails the run, when the tests are done. It is given
# every module by its installed name (tests/typecheck.py).
mypy_log=$(mktemp)
.venv/bin/python -m tests.typecheck >"$mypy_log" 2>&1 &
mypy_pid=$!

# The integration tests mostly wait (time-scaled runs, moto, sshd, Grid Engine, Slurm):
# eight pytest-xdist workers run them side by side (their tests' durations add up to
# about seven times the phase's length; with four workers it took 624 s, with six 485 s,
# at 0d36bad; eight passed beside three other people's work in CI run 51, and the suite
# passes with a CPU-bound process beside it). The
# unit tests are CPU-bound: one process runs them, from the end of the python set-up,
# beside the service set-up and then the integration tests, on the core those leave (the
# suite passes with a CPU-bound process beside it). Their output is printed when both are
# done. Tests that share Grid Engine are one xdist group
# (tests/integration/sge.py), tests that share Slurm another (tests/integration/slurm.py).
unit_log=$(mktemp)
.venv/bin/python -m pytest tests/unit -q >"$unit_log" 2>&1 &
unit_pid=$!
# A process started in the background: waited for, its header and output printed; its
# exit code returned.
collect() {
  local what=$1 pid=$2 log=$3 rc=0
  wait "$pid" || rc=$?
  phase "$what"
  cat "$log"
  rm -f "$log"
  return "$rc"
}
services_rc=0
collect "services set up (beside the python environment and the unit tests)" \
  "$services_pid" "$services_log" || services_rc=$?
services_pid=""
[ "$services_rc" -eq 0 ] || { echo "error: setting up the services failed (exit $services_rc)" >&2; exit "$services_rc"; }
integration_rc=0
run_pytest integration no tests/integration -q --durations=25 -n 8 --dist loadgroup -m "not alone" ||
  integration_rc=$?
# Tests marked `alone` compare a real run's timing or spend with what the host's load
# would shift: they run after the other integration tests, four at a time, with at most
# the unit tests' one process still beside them (the suite passes with a CPU-bound process
# beside it; they mostly wait on their runs, and passed two at a time beside three other
# people's work at a load average of 8).
alone_rc=0
if [ "$integration_rc" -eq 0 ]; then
  run_pytest "integration (alone)" yes tests/integration -q --durations=8 -n 4 --dist loadgroup -m alone ||
    alone_rc=$?
fi
unit_rc=0
collect "pytest: unit (ran beside the integration tests)" "$unit_pid" "$unit_log" || unit_rc=$?
unit_pid=""
if [ "$unit_rc" -eq 5 ]; then echo "error: no unit tests were collected" >&2; exit 1; fi
[ "$unit_rc" -eq 0 ] || { echo "error: the unit tests failed (exit $unit_rc)" >&2; exit "$unit_rc"; }
mypy_rc=0
collect "mypy (ran beside the tests)" "$mypy_pid" "$mypy_log" || mypy_rc=$?
mypy_pid=""
[ "$mypy_rc" -eq 0 ] || { echo "error: mypy found problems (exit $mypy_rc)" >&2; exit "$mypy_rc"; }
[ "$integration_rc" -eq 0 ] || exit "$integration_rc"
[ "$alone_rc" -eq 0 ] || exit "$alone_rc"
phase "done"
