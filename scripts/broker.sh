#!/usr/bin/env bash
# Starts or stops a local Apache Kafka broker in KRaft mode (one node that is both
# broker and controller) on 127.0.0.1.
#   scripts/broker.sh start [key=value …]  fresh data directory and free ports;
#                                         extra broker properties override ours;
#                                         prints the broker's settings as KEY=VALUE lines
#   scripts/broker.sh stop                stops it by PID (TERM, then KILL)
#   scripts/broker.sh kill                kills it with SIGKILL, keeping its data
#   scripts/broker.sh resume              starts it again on the same data and ports
#   scripts/broker.sh env                 prints the running broker's settings
#
# Listeners: PLAINTEXT (KSHARD_BROKERS), SSL, SASL_PLAINTEXT and SASL_SSL, with
# SASL PLAIN and SCRAM-SHA-512; TLS from a throwaway CA made with openssl at
# start (KSHARD_BROKER_CA). The standard authorizer is on: PLAINTEXT and SSL
# clients (User:ANONYMOUS) and User:admin are super users; over SASL,
#   kshard   may Describe every topic and Read __consumer_offsets (what
#            `kshard serve` needs by default),
#   monitor  may Describe every topic and group (what scrape_mode admin_api needs),
#   nobody   may do nothing.
# Their passwords are random per start: KSHARD_BROKER_PASSWORD_<USER>. (The
# SCRAM ones pass on kafka-storage's command line at format time: test
# credentials of a broker on 127.0.0.1 only.)
# State lives in $KSHARD_STATE_DIR/broker (default .kshard/broker).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="$KSHARD_STATE_DIR/broker"
pidfile="$KSHARD_STATE_DIR/broker.pid"
envfile="$KSHARD_STATE_DIR/broker.env"
users=(admin kshard monitor nobody)

start() {
  [[ -f "$KAFKA_HOME/.complete" ]] || die "Kafka is not installed: run scripts/install.sh"
  if pid_alive "$pidfile"; then
    die "a broker is already running (pid $(cat "$pidfile")); run scripts/broker.sh stop first"
  fi
  local began=$SECONDS
  rm -rf "$dir"
  mkdir -p "$dir/tls"
  # Passwords, keys and the broker's configuration are for this user only.
  umask 077
  local plaintext ssl sasl_plaintext sasl_ssl controller
  { read -r plaintext; read -r ssl; read -r sasl_plaintext; read -r sasl_ssl; read -r controller; } < <(free_ports 5)
  make_certificates "$dir/tls"
  declare -A password
  for user in "${users[@]}"; do password[$user]="$(openssl rand -hex 16)"; done

  {
    echo "KSHARD_BROKERS=127.0.0.1:$plaintext"
    echo "KSHARD_BROKERS_SSL=127.0.0.1:$ssl"
    echo "KSHARD_BROKERS_SASL_PLAINTEXT=127.0.0.1:$sasl_plaintext"
    echo "KSHARD_BROKERS_SASL_SSL=127.0.0.1:$sasl_ssl"
    echo "KSHARD_BROKER_CA=$dir/tls/ca.pem"
    echo "KSHARD_BROKER_STATE_DIR=$KSHARD_STATE_DIR"
    for user in "${users[@]}"; do echo "KSHARD_BROKER_PASSWORD_${user^^}=${password[$user]}"; done
  } >"$dir/broker.env"

  local plain_users="" user
  for user in "${users[@]}"; do plain_users+=" user_$user=\"${password[$user]}\""; done
  local plain_jaas="org.apache.kafka.common.security.plain.PlainLoginModule required$plain_users;"
  local scram_jaas="org.apache.kafka.common.security.scram.ScramLoginModule required;"
  cat >"$dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$plaintext,SSL://127.0.0.1:$ssl,SASL_PLAINTEXT://127.0.0.1:$sasl_plaintext,SASL_SSL://127.0.0.1:$sasl_ssl,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$plaintext,SSL://127.0.0.1:$ssl,SASL_PLAINTEXT://127.0.0.1:$sasl_plaintext,SASL_SSL://127.0.0.1:$sasl_ssl
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
# One node: every internal topic with one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Four state partitions, not 50: every test service with a data directory
# gives each a shard; a test needs no more.
share.coordinator.state.topic.num.partitions=4
group.initial.rebalance.delay.ms=0
# Short segments and an eager cleaner, so that compaction of __consumer_offsets
# really happens while tests run.
log.segment.bytes=1048576
offsets.topic.segment.bytes=1048576
log.roll.ms=10000
log.cleaner.enable=true
log.cleaner.backoff.ms=1000
log.cleaner.min.cleanable.ratio=0.01
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.io.buffer.size=1048576
# Security: TLS from the throwaway CA, SASL PLAIN and SCRAM-SHA-512, ACLs.
ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/broker.pem
ssl.client.auth=none
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=$plain_jaas
listener.name.sasl_ssl.plain.sasl.jaas.config=$plain_jaas
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$scram_jaas
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram_jaas
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
allow.everyone.if.no.acl.found=false
PROPERTIES
  local extra
  for extra in "$@"; do
    [[ "$extra" == *=* ]] || die "not a broker property (key=value): $extra"
    echo "$extra" >>"$dir/server.properties"
  done

  local cluster_id scram=()
  cluster_id="$(new_cluster_id)"
  for user in "${users[@]}"; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=${password[$user]}]")
  done
  kafka_tool kafka.tools.StorageTool format --cluster-id "$cluster_id" --config "$dir/server.properties" \
    "${scram[@]}" >"$dir/format.log" 2>&1 || { cat "$dir/format.log" >&2; die "formatting the broker's storage failed"; }

  start_choosing_ports broker launch choose_other_ports
  # Read again: other ports may have been chosen.
  plaintext="$(sed -n 's/^KSHARD_BROKERS=127.0.0.1://p' "$dir/broker.env")"
  create_acls "$plaintext"
  log "broker up in $((SECONDS - began)) s (pid $(cat "$pidfile")), log: $dir/broker.log"
  cp "$dir/broker.env" "$envfile"
  cat "$envfile"
}

# Starts the JVM on the formatted data directory and waits until it serves
# (see start_choosing_ports for a port taken meanwhile).
launch() {
  local plaintext
  plaintext="$(sed -n 's/^KSHARD_BROKERS=127.0.0.1://p' "$dir/broker.env")"
  : >"$dir/broker.log"
  java -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2.xml" \
    -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 &
  echo $! >"$pidfile"
  wait_until_up "$pidfile" broker "$dir/broker.log" serving "$plaintext"
}

# Gives the broker free ports in place of those its configuration names
# (server.properties and broker.env), each replaced through a placeholder so
# that a new port equal to another old one is not replaced twice.
choose_other_ports() {
  local old new i
  mapfile -t old < <(sed -n 's/^listeners=//p' "$dir/server.properties" | grep -oE ':[0-9]+' | tr -d :)
  mapfile -t new < <(free_ports "${#old[@]}")
  for i in "${!old[@]}"; do
    sed -i "s/127\.0\.0\.1:${old[$i]}\b/127.0.0.1:@port$i@/g" "$dir/server.properties" "$dir/broker.env"
  done
  for i in "${!new[@]}"; do
    sed -i "s/@port$i@/${new[$i]}/g" "$dir/server.properties" "$dir/broker.env"
  done
  log "starting the broker again on ports ${new[*]}"
}

# True once the broker has logged that it started and accepts connections.
serving() {
  grep -q "Kafka Server started" "$dir/broker.log" && port_open "$1"
}

# A CA and a broker certificate for 127.0.0.1 and localhost, valid for 7 days.
make_certificates() {
  local tls="$1"
  (
    cd "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
      -subj "/CN=kshard test CA" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=127.0.0.1" -keyout broker.key -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 7 \
      -extfile san.ext -out broker.crt 2>/dev/null
    cat broker.key broker.crt ca.pem >broker.pem
    # Clients need the CA certificate.
    chmod 644 ca.pem
  ) || die "making the test certificates with openssl failed"
}

# The ACLs of the SASL users (see the header), through Kafka's own kafka-acls.
create_acls() {
  local bootstrap="127.0.0.1:$1"
  # (Kafka 3 has it in Scala, under kafka.admin.)
  local class=org.apache.kafka.tools.AclCommand
  [[ "$KAFKA_VERSION" == 3.* ]] && class=kafka.admin.AclCommand
  acl() { kafka_tool "$class" --bootstrap-server "$bootstrap" --add --force "$@" >>"$dir/acls.log" 2>&1; }
  local pids=() pid
  acl --allow-principal User:kshard --operation Read --operation Describe --topic __consumer_offsets &
  pids+=($!)
  acl --allow-principal User:kshard --allow-principal User:monitor --operation Describe --topic '*' &
  pids+=($!)
  acl --allow-principal User:monitor --operation Describe --group '*' &
  pids+=($!)
  for pid in "${pids[@]}"; do
    wait "$pid" || { cat "$dir/acls.log" >&2; die "creating the ACLs failed"; }
  done
}

resume() {
  [[ -f "$dir/broker.env" ]] || die "no broker data to resume in $dir"
  if pid_alive "$pidfile"; then
    die "the broker is running (pid $(cat "$pidfile"))"
  fi
  local began=$SECONDS
  launch
  log "broker resumed in $((SECONDS - began)) s (pid $(cat "$pidfile"))"
  cp "$dir/broker.env" "$envfile"
  cat "$envfile"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop_pid "$pidfile" broker; rm -f "$envfile" ;;
  kill) kill_pid "$pidfile" "the broker" "$dir" ;;
  resume) resume ;;
  env) [[ -f "$envfile" ]] && pid_alive "$pidfile" || die "no broker running"; cat "$envfile" ;;
  *) die "usage: scripts/broker.sh start [key=value …]|stop|kill|resume|env" ;;
esac
