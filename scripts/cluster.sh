#!/usr/bin/env bash
# Starts or stops a local Apache Kafka cluster of three KRaft nodes (each both
# broker and controller, one quorum of three) on 127.0.0.1, PLAINTEXT only: for
# the faults a single broker cannot show (a partition's leader moving to
# another broker, a broker of several going down).
#   scripts/cluster.sh start [key=value …]  fresh data directories and free ports;
#                                          extra properties for every node;
#                                          prints KSHARD_CLUSTER_BROKERS=a,b,c and
#                                          KSHARD_CLUSTER_NODE_<id>=host:port lines
#   scripts/cluster.sh stop                stops every node by PID
#   scripts/cluster.sh kill ID             kills node ID (1-3) with SIGKILL, keeping its data
#   scripts/cluster.sh resume ID           starts node ID again on its data and ports
# State lives in $KSHARD_STATE_DIR/cluster (default .kshard/cluster).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="$KSHARD_STATE_DIR/cluster"
envfile="$dir/cluster.env"
nodes=(1 2 3)

pidfile() { echo "$dir/node-$1.pid"; }

start() {
  [[ -f "$KAFKA_HOME/.complete" ]] || die "Kafka is not installed: run scripts/install.sh"
  local id
  for id in "${nodes[@]}"; do
    pid_alive "$(pidfile "$id")" && die "a cluster is already running; run scripts/cluster.sh stop first"
  done
  local began=$SECONDS
  rm -rf "$dir"
  mkdir -p "$dir"
  local ports=()
  mapfile -t ports < <(free_ports 6)
  local voters="" brokers=""
  for id in "${nodes[@]}"; do
    voters+="${voters:+,}$id@127.0.0.1:${ports[$((id + 2))]}"
    brokers+="${brokers:+,}127.0.0.1:${ports[$((id - 1))]}"
  done
  {
    echo "KSHARD_CLUSTER_BROKERS=$brokers"
    for id in "${nodes[@]}"; do echo "KSHARD_CLUSTER_NODE_$id=127.0.0.1:${ports[$((id - 1))]}"; done
    echo "KSHARD_CLUSTER_STATE_DIR=$KSHARD_STATE_DIR"
  } >"$envfile"
  local cluster_id
  cluster_id="$(new_cluster_id)"
  for id in "${nodes[@]}"; do
    local node="$dir/node-$id" port="${ports[$((id - 1))]}" controller="${ports[$((id + 2))]}"
    mkdir -p "$node"
    cat >"$node/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$node/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=4
share.coordinator.state.topic.num.partitions=4
group.initial.rebalance.delay.ms=0
# Leaders go back to their preferred replica soon after it returns.
leader.imbalance.check.interval.seconds=5
PROPERTIES
    local extra
    for extra in "$@"; do
      [[ "$extra" == *=* ]] || die "not a broker property (key=value): $extra"
      echo "$extra" >>"$node/server.properties"
    done
    kafka_tool kafka.tools.StorageTool format --cluster-id "$cluster_id" --config "$node/server.properties" \
      >"$node/format.log" 2>&1 || { cat "$node/format.log" >&2; die "formatting node $id's storage failed"; }
  done
  for id in "${nodes[@]}"; do launch "$id" no-wait; done
  for id in "${nodes[@]}"; do wait_for "$id"; done
  log "cluster of ${#nodes[@]} up in $((SECONDS - began)) s, logs: $dir/node-*/node.log"
  cat "$envfile"
}

# Starts node $1's JVM on its data directory; waits until it serves unless $2.
launch() {
  local id="$1" node="$dir/node-$1"
  : >"$node/node.log"
  java -Xms128m -Xmx384m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2.xml" \
    -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$node/server.properties" >>"$node/node.log" 2>&1 &
  echo $! >"$(pidfile "$id")"
  [[ -n "${2:-}" ]] || wait_for "$id"
}

wait_for() {
  local id="$1" port
  port="$(sed -n "s/^KSHARD_CLUSTER_NODE_$id=127.0.0.1://p" "$envfile")"
  wait_until_up "$(pidfile "$id")" "node $id" "$dir/node-$id/node.log" serving "$id" "$port"
}

serving() {
  grep -q "Kafka Server started" "$dir/node-$1/node.log" && port_open "$2"
}

node_id() {
  [[ "${1:-}" =~ ^[123]$ ]] || die "which node: 1, 2 or 3"
  echo "$1"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) for id in "${nodes[@]}"; do stop_pid "$(pidfile "$id")" "cluster node $id"; done ;;
  kill) id="$(node_id "${2:-}")"; kill_pid "$(pidfile "$id")" "cluster node $id" "$dir/node-$id" ;;
  resume)
    id="$(node_id "${2:-}")"
    pid_alive "$(pidfile "$id")" && die "node $id is running"
    launch "$id"
    log "node $id resumed (pid $(cat "$(pidfile "$id")"))"
    ;;
  *) die "usage: scripts/cluster.sh start [key=value …]|stop|kill ID|resume ID" ;;
esac
