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
started=$SECONDS
# `timeout` runs the binary in a process group of its own (so that on the
# deadline it stops the binary's children too: TERM, then KILL 30 s later),
# which a Ctrl-C or a TERM to scripts/test.sh does not reach: they are
# handed on. libtest says "test <name> has been running for over 60 seconds"
# of a long test, which names the ones left at the deadline.
timeout --kill-after=30s "${minutes}m" "$@" > >(tee "$out") 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' INT TERM HUP
wait "$pid"
status=$?
# A signal handed on interrupts `wait`: wait for the end itself.
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  status=$?
done
trap - INT TERM HUP
# The output, all of it, before it is read (bash waits for the last
# process substitution too).
wait
elapsed=$((SECONDS - started))
if [[ ($status -eq 124 || $status -eq 137) && $elapsed -ge $(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }') ]]; then
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
if [[ $status -eq 137 ]]; then
  printf '[kshard] error: %s was killed (SIGKILL, %s s in: out of memory?)\n' "$(basename "$binary")" "$elapsed" >&2
fi
rm -f "$out"
exit "$status"
