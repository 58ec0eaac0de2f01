#!/usr/bin/env bash
# Runs the tests' Kafka Streams application (scripts/java/StreamsApp.java, on
# the streams rebalance protocol) against a local broker:
#   scripts/streams-app.sh BOOTSTRAP APPLICATION_ID INPUT OUTPUT SECONDS
# Java runs the one source file directly; Kafka's jars and Kafka Streams'
# (both from scripts/install.sh) are its classpath.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f "$KAFKA_STREAMS_HOME/.complete" ]] || die "Kafka Streams is not installed: run scripts/install.sh"
exec java -Xshare:auto -XX:+UseSerialGC -Xmx256m -Djava.io.tmpdir="${TMPDIR:-/tmp}" \
  -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2-tools.xml" \
  -cp "$KAFKA_HOME/libs/*:$KAFKA_STREAMS_HOME/*" "$KSHARD_ROOT/scripts/java/StreamsApp.java" "$@"
