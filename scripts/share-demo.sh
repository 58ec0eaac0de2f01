#!/usr/bin/env bash
# Runs the demo's share group member (scripts/java/ShareDemo.java): it
# accepts every record of TOPIC but those whose value is "poison", which it
# releases until Kafka archives them.
#   scripts/share-demo.sh BOOTSTRAP GROUP TOPIC SECONDS
# Java runs the one source file directly; Kafka's jars are its classpath.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f "$KAFKA_HOME/.complete" ]] || die "Kafka is not installed: run scripts/install.sh"
exec java -Xshare:auto -XX:+UseSerialGC -Xmx128m \
  -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2-tools.xml" \
  -cp "$KAFKA_HOME/libs/*" "$KSHARD_ROOT/scripts/java/ShareDemo.java" "$@"
