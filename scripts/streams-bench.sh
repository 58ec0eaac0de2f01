#!/usr/bin/env bash
# Runs the Kafka Streams side of `kshard bench runtime`
# (scripts/java/StreamsBench.java: the sum and the word count, exactly-once v2,
# one standby, RocksDB stores) against a local broker:
#   scripts/streams-bench.sh sum|wordcount BOOTSTRAP APPLICATION_ID INPUT OUTPUT \
#     STATE_DIR THREADS SESSION_TIMEOUT_MS REPLICATION COMMIT_INTERVAL_MS
#   scripts/streams-bench.sh --compile      (compiles it, and stops)
# Java runs it, compiled once, with Kafka's jars and Kafka Streams'
# (both from scripts/install.sh) as its classpath, on the JVM's default
# collector (G1) and a 1 GiB heap (KSHARD_STREAMS_JAVA_OPTS overrides both).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f "$KAFKA_STREAMS_HOME/.complete" && -n "$(ls "$KAFKA_STREAMS_HOME"/rocksdbjni-*.jar 2>/dev/null)" ]] \
  || die "Kafka Streams (with RocksDB) is not installed: run scripts/install.sh"
classpath="$KAFKA_HOME/libs/*:$KAFKA_STREAMS_HOME/*"
# Compiled once (not at each start, which a restart's time would include).
classes="$KSHARD_TOOLS_DIR/streams-bench-classes"
source_file="$KSHARD_ROOT/scripts/java/StreamsBench.java"
if [[ ! "$classes/StreamsBench.class" -nt "$source_file" ]]; then
  mkdir -p "$classes"
  javac -nowarn -d "$classes" -cp "$classpath" "$source_file" || die "javac failed on $source_file"
fi
[[ "${1:-}" == --compile ]] && exit 0
# shellcheck disable=SC2086
exec java ${KSHARD_STREAMS_JAVA_OPTS:--Xmx1g} -Xshare:auto -Djava.io.tmpdir="${TMPDIR:-/tmp}" \
  -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2-tools.xml" \
  -cp "$classes:$classpath" StreamsBench "$@"
