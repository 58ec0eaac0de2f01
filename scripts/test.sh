#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, starts a
# broker (Apache Kafka, KRaft) and an etcd on 127.0.0.1 (free ports, fresh data
# directories), runs the
# formatting check, clippy and every test, and stops both services by PID, even
# when a step fails.
# Usage: scripts/test.sh [extra cargo test arguments]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$KSHARD_ROOT"

"$KSHARD_ROOT/scripts/install.sh"

# This run's services live in their own state directory, so a developer's own
# broker (in .kshard) and concurrent runs are left alone.
KSHARD_STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/kshard-test.XXXXXX")"
export KSHARD_STATE_DIR
# Tests that start services of their own keep them under this directory too, so
# that the cleanup below finds every PID file, even after a test was killed.
export TMPDIR="$KSHARD_STATE_DIR/tmp"
mkdir -p "$TMPDIR"
cleanup() {
  local status=$?
  # A failed run keeps its logs (members', brokers', etcd's) for whoever
  # reads the failure: the state directory itself goes.
  if ((status != 0)); then
    local kept="$KSHARD_ROOT/target/failed-run-logs"
    rm -rf "$kept"
    while IFS= read -r logfile; do
      mkdir -p "$kept/$(dirname "${logfile#"$KSHARD_STATE_DIR"/}")"
      cp "$logfile" "$kept/${logfile#"$KSHARD_STATE_DIR"/}" || true
    done < <(find "$KSHARD_STATE_DIR" -name '*.log' -size -64M 2>/dev/null)
    log "the failed run's logs are in $kept"
  fi
  "$KSHARD_ROOT/scripts/broker.sh" stop || true
  "$KSHARD_ROOT/scripts/etcd.sh" stop || true
  while IFS= read -r pidfile; do
    stop_pid "$pidfile" "$(basename "$pidfile" .pid) left by a test"
  done < <(find "$KSHARD_STATE_DIR" -name '*.pid' 2>/dev/null)
  rm -rf "$KSHARD_STATE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every KEY=VALUE line the scripts print (addresses, the CA, test users'
# passwords) is exported for the tests.
broker_env="$("$KSHARD_ROOT/scripts/broker.sh" start)"
etcd_env="$("$KSHARD_ROOT/scripts/etcd.sh" start)"
export_settings "$broker_env"
export_settings "$etcd_env"
log "testing against KSHARD_BROKERS=$KSHARD_BROKERS KSHARD_ETCD=$KSHARD_ETCD"

# A test is ignored only because it needs the broker or etcd, which this
# script provides: any other reason (a helper of another test, say) would run
# here under --include-ignored and count as a passed test that checked nothing.
ignored_reason='#[ignore = "needs the real broker or etcd: scripts/test.sh runs it (or cargo test -- --include-ignored)"]'
if odd=$(grep -rn --include='*.rs' '#\[ignore' crates fuzz | grep -vF "$ignored_reason"); then
  die "tests ignored for another reason than needing the broker or etcd (run them, or make them no test): $odd"
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# A single-process application's build: kshard-runtime without etcd (no
# etcd-client, tonic or protoc; crates/runtime/tests/features.rs checks the tree).
cargo clippy -p kshard-runtime --lib --no-default-features --locked -- -D warnings
# The libraries' documentation, as docs.rs would build it: no broken or private links.
RUSTDOCFLAGS="-D warnings" cargo doc -p kshard-offsets -p kshard-kafka -p kshard-lag -p kshard-runtime --no-deps --locked
# Tests that need the broker or etcd are #[ignore]d for a plain `cargo test`
# (which then says so); here they run too. A test that would skip for want
# of a tool (promtool, say) fails instead: this script installs them all.
export KSHARD_NO_SKIP=1
# Every test binary runs under a deadline (scripts/test-runner.sh): a hung test
# fails the run with its name instead of hanging it.
runner_var="CARGO_TARGET_$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')_RUNNER"
export "$runner_var=$KSHARD_ROOT/scripts/test-runner.sh"
# `cargo test` exits 0 when a filter matches nothing; count what ran so that an
# empty run (a broken harness, a mistyped filter) fails instead of passing.
out="$KSHARD_STATE_DIR/cargo-test.log"
cargo test --workspace --lib --bins --tests --examples --locked "$@" -- --include-ignored 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
[[ $status -eq 0 ]] || exit "$status"
# The benchmarks, once each as a test (criterion takes no --include-ignored).
cargo test --workspace --benches --locked 2>&1 | tee -a "$out"
status=${PIPESTATUS[0]}
[[ $status -eq 0 ]] || exit "$status"
if grep -q ' ignored, ' "$out"; then
  die "a test was left out (ignored) of the whole suite"
fi
ran=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($i=="passed;") n+=$(i-1)} END{print n+0}' "$out")
if [[ -z "$ran" || "$ran" -eq 0 ]]; then
  die "no tests ran"
fi
# kshard's transactional writer on Kafka 3 too ($KAFKA_3_VERSION, which
# scripts/install.sh installed): the writer's tests, the runtime's log and
# Partitions contract, and word count's exactly-once through kill -9 and a
# zombie, run again on a broker of that version (about a minute). The test
# binaries are the ones built above, listed by the same cargo selection: a
# narrower one (`--test writer`) would resolve other features and rebuild.
kafka3_tests="$(cargo test --workspace --lib --bins --tests --examples --locked --no-run --message-format=json |
  python3 -c '
import json, os, sys
wanted = {"writer", "partitions_kafka", "recovery_log_kafka", "wordcount"}
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") in wanted and t.get("kind") == ["test"]:
        print(os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
')"
[[ $(wc -l <<<"$kafka3_tests") -eq 4 ]] || die "the test binaries to run on Kafka $KAFKA_3_VERSION: $kafka3_tests"
kafka3_state="$KSHARD_STATE_DIR/kafka-$KAFKA_3_VERSION"
kafka3_env="$(KAFKA_VERSION="$KAFKA_3_VERSION" KSHARD_STATE_DIR="$kafka3_state" "$KSHARD_ROOT/scripts/broker.sh" start)"
kafka3_out="$KSHARD_STATE_DIR/cargo-test-kafka3.log"
status=0
(
  export_settings "$kafka3_env"
  export KAFKA_VERSION="$KAFKA_3_VERSION"
  log "testing the transactional writer against Kafka $KAFKA_3_VERSION at KSHARD_BROKERS=$KSHARD_BROKERS"
  while IFS=$'\t' read -r package binary; do
    # As cargo runs a test binary: in its package's directory, under the deadline.
    (cd "$package" && "$KSHARD_ROOT/scripts/test-runner.sh" "$binary" --include-ignored \
      --skip the_leader_of_an_output_partition </dev/null) 2>&1 | tee -a "$kafka3_out"
  done <<<"$kafka3_tests"
) || status=$?
KSHARD_STATE_DIR="$kafka3_state" "$KSHARD_ROOT/scripts/broker.sh" stop || true
[[ $status -eq 0 ]] || exit "$status"
ran3=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($i=="passed;") n+=$(i-1)} END{print n+0}' "$kafka3_out")
[[ "$ran3" -gt 0 ]] || die "no tests ran against Kafka $KAFKA_3_VERSION"
cargo test --workspace --doc --locked
# The example application of docs/first-application.md, a crate of its own
# outside the workspace, on the library's public surface only: linted, built
# and run through its simulation test (kshard's target directory, so that
# what it shares with kshard's build is built once).
first_app=(--manifest-path "$KSHARD_ROOT/examples/first-app/Cargo.toml" --locked)
CARGO_TARGET_DIR="$KSHARD_ROOT/target" cargo fmt --manifest-path "$KSHARD_ROOT/examples/first-app/Cargo.toml" -- --check
CARGO_TARGET_DIR="$KSHARD_ROOT/target" cargo clippy "${first_app[@]}" --all-targets -- -D warnings
CARGO_TARGET_DIR="$KSHARD_ROOT/target" cargo test "${first_app[@]}"
log "all $ran tests passed, and $ran3 of them again on Kafka $KAFKA_3_VERSION"
