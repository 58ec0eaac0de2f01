#!/usr/bin/env bash
# Runs one of Apache Kafka's own command-line tools from the installed jars, e.g.
#   scripts/kafka-tool.sh consumer-groups --bootstrap-server 127.0.0.1:PORT --describe --all-groups
#   scripts/kafka-tool.sh acls --bootstrap-server 127.0.0.1:PORT --list
# Tests use it to ask Kafka itself what kshard should report.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-}" in
  consumer-groups) class=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  acls) class=org.apache.kafka.tools.AclCommand ;;
  topics) class=org.apache.kafka.tools.TopicCommand ;;
  delete-records) class=org.apache.kafka.tools.DeleteRecordsCommand ;;
  get-offsets) class=org.apache.kafka.tools.GetOffsetShell ;;
  share-groups) class=org.apache.kafka.tools.consumer.group.ShareGroupCommand ;;
  console-share-consumer) class=org.apache.kafka.tools.consumer.ConsoleShareConsumer ;;
  configs) class=org.apache.kafka.tools.ConfigCommand ;;
  features) class=org.apache.kafka.tools.FeatureCommand ;;
  *) die "usage: scripts/kafka-tool.sh consumer-groups|acls|topics|delete-records|get-offsets|share-groups|console-share-consumer|configs|features ARGS…" ;;
esac
# Kafka 3 has these two in Scala, under kafka.admin.
if [[ "$KAFKA_VERSION" == 3.* && ( "$1" == acls || "$1" == configs ) ]]; then
  class="kafka.admin.${class##*.}"
fi
shift
kafka_tool "$class" "$@"
