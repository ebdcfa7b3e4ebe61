#!/usr/bin/env bash
# Install everything the tests need and run them: lint, types, unit and integration tests.
# Used as is by CI (.ci/run). Under CI=true a service an integration test needs must run,
# never be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy

# pytest exits 5 when it collects nothing: for the unit tests that is a failure (they
# must exist); for the integration tests it only means there are none yet.
run_pytest() {
  local what=$1 empty_ok=$2
  shift 2
  echo "== pytest: $what"
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

run_pytest unit no tests/unit -q
run_pytest integration no tests/integration -q
