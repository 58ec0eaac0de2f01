#!/usr/bin/env bash
# The main job, from a fresh machine: installs what is missing, starts a local
# Apache Kafka broker (KRaft) on 127.0.0.1, creates 50 background groups that
# commit through the group coordinator and finish caught up (so that the page
# opens on the live groups, the most urgent first), starts
# live demo groups of every kind (`kshard demo`: producers; classic groups
# keeping up and falling behind; a KIP-848 group; a transactional one that
# aborts every fifth commit; a stalled one; and on the JVM a share group
# whose member keeps releasing a poison record until Kafka archives it, and
# a Kafka Streams application's group), and runs the lag monitor until
# Ctrl-C. The broker and the demo are stopped by PID when the script ends.
# Usage: scripts/run.sh [kshard serve options]   (listens on $KSHARD_LISTEN, default 127.0.0.1:9308)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$KSHARD_ROOT"

"$KSHARD_ROOT/scripts/install.sh"
log "building kshard (release)"
cargo build --release --locked -p kshard
kshard="$KSHARD_ROOT/target/release/kshard"

"$KSHARD_ROOT/scripts/broker.sh" stop >/dev/null 2>&1 || true
trap '"$KSHARD_ROOT/scripts/broker.sh" stop' EXIT
trap 'exit 130' INT TERM
broker_env="$("$KSHARD_ROOT/scripts/broker.sh" start)"
export_settings "$broker_env"

log "creating 50 background groups (commits through the group coordinator, ending caught up)"
"$kshard" loadgen --groups 50 --partitions 3 --rounds 5 --topics 5 --prefix static --caught-up
log "starting live demo groups (kshard demo, a share group and a Kafka Streams application)"
"$kshard" demo --brokers "$KSHARD_BROKERS" &
demo_pids=("$!")
# Once the demo made their topics; they run until this script ends (ten years at most).
for _ in $(seq 60); do
  "$KSHARD_ROOT/scripts/kafka-tool.sh" topics --bootstrap-server "$KSHARD_BROKERS" --list 2>/dev/null |
    grep -q '^demo-orders-upper$' && break
  sleep 1
done
"$KSHARD_ROOT/scripts/share-demo.sh" "$KSHARD_BROKERS" demo-jobs-workers demo-jobs 315360000 >/dev/null 2>&1 &
demo_pids+=("$!")
"$KSHARD_ROOT/scripts/streams-app.sh" "$KSHARD_BROKERS" demo-orders-streams demo-orders demo-orders-upper 315360000 \
  >/dev/null 2>&1 &
demo_pids+=("$!")
trap 'kill -TERM "${demo_pids[@]}" 2>/dev/null || true; "$KSHARD_ROOT/scripts/broker.sh" stop' EXIT

listen="${KSHARD_LISTEN:-127.0.0.1:9308}"
cat >&2 <<MSG

[kshard] the lag monitor is starting; look at
  http://$listen/            the web page
  http://$listen/metrics     Prometheus metrics (kminion-compatible names)
  http://$listen/ready       readiness and catch-up progress
  http://$listen/api/groups  every group's lag as JSON
[kshard] the live demo groups, first on the page (the most urgent first):
  demo-clicks-stalled   committed once, no members: lag grows, status STOP (ERR)
  demo-orders-slow      a classic member reading 20 of 60 records/s: lag grows, WARN
  demo-payments-txn     commits inside transactions, every fifth aborted: aborted
                        commits never count (lag stays about 5 per partition)
  demo-orders-fast      a classic member keeping up: lag near 0, OK
  demo-clicks-kip848    a KIP-848 member (group.protocol=consumer) keeping up
  demo-jobs-workers     a share group (KIP-932): one record in a hundred is poison,
                        released each time until Kafka archives it after 5
                        deliveries (records in flight, redelivered, archived)
  demo-orders-streams   a Kafka Streams application (streams protocol, KIP-1071):
                        its members, tasks and topology
  then 50 background groups (static-group-…), caught up: lag 0, OK
[kshard] broker: KSHARD_BROKERS=$KSHARD_BROKERS; write more with:
  $kshard loadgen --brokers $KSHARD_BROKERS --groups 20 --prefix more
[kshard] Ctrl-C stops the monitor and the broker.

MSG
# In the background, so that a TERM to this script stops the monitor too.
"$kshard" serve --brokers "$KSHARD_BROKERS" --listen "$listen" --watermark-interval-seconds 2 "$@" &
serve_pid=$!
trap 'kill -TERM "$serve_pid" "${demo_pids[@]}" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; "$KSHARD_ROOT/scripts/broker.sh" stop' EXIT
wait "$serve_pid"
