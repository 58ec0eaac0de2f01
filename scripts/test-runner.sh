#!/usr/bin/env bash
# Runs one test binary for `cargo test` (scripts/test.sh makes it cargo's
# runner) under a deadline: a binary still running after
# KSHARD_TEST_BINARY_MINUTES (30 by default) is stopped, and the run fails
# naming the binary and each test that had started and not finished, instead
# of hanging until CI gives up on the whole suite.
# Usage (by cargo): scripts/test-runner.sh <test binary> [libtest arguments]
set -uo pipefail

minutes="${KSHARD_TEST_BINARY_MINUTES:-30}"
binary="$1"
out="$(mktemp "${TMPDIR:-/tmp}/kshard-test-binary.XXXXXX")"
# libtest says "test <name> has been running for over 60 seconds" of a long
# test; `timeout` stops the binary (TERM, then KILL 30 s later).
timeout --kill-after=30s "${minutes}m" "$@" 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if [[ $status -eq 124 || $status -eq 137 ]]; then
  {
    printf '[kshard] error: %s ran past %s minutes and was stopped.\n' "$(basename "$binary")" "$minutes"
    # Tests that started running long and never ended (ok, FAILED, ignored).
    # (Quiet output puts the notice after a run of dots.)
    awk '
      match($0, /test [^ ]+ has been running for over/) {
        name = substr($0, RSTART + 5, RLENGTH - 5); sub(/ has been running.*/, "", name); running[name] = 1
      }
      match($0, /test [^ ]+ \.\.\. (ok|FAILED|ignored)/) {
        name = substr($0, RSTART + 5, RLENGTH - 5); sub(/ \.\.\..*/, "", name); delete running[name]
      }
      END { for (name in running) print "[kshard] still running: " name }
    ' "$out"
  } >&2
  rm -f "$out"
  exit 1
fi
rm -f "$out"
exit "$status"
