#!/usr/bin/env bash
# Creates __consumer_offsets as Kafka does (50 partitions, cleanup.policy=compact)
# on the local broker. tansu never creates it itself. Idempotent.
# Usage: scripts/create-offsets-topic.sh [127.0.0.1:PORT]   (default: the running broker)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

brokers="${1:-}"
if [[ -z "$brokers" ]]; then
  brokers="$("$KSHARD_ROOT/scripts/broker.sh" env)"
  brokers="${brokers#KSHARD_BROKERS=}"
fi
if "$TANSU_BIN" topic list --broker "tcp://$brokers" 2>/dev/null | grep -q '"name":"__consumer_offsets"'; then
  log "__consumer_offsets already exists on $brokers"
  exit 0
fi
"$TANSU_BIN" topic create __consumer_offsets --broker "tcp://$brokers" --partitions 50 --config cleanup.policy=compact
log "created __consumer_offsets (50 partitions, compacted) on $brokers"
