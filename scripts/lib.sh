# shellcheck shell=bash
# Shared settings and helpers for kshard's development scripts. Sourced, not run.

set -euo pipefail

KSHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where tools installed once are kept between runs (the broker's jars).
KSHARD_TOOLS_DIR="${KSHARD_TOOLS_DIR:-$HOME/.cache/kshard-tools}"
# Where running services keep their data directories, PID files and logs.
KSHARD_STATE_DIR="${KSHARD_STATE_DIR:-$KSHARD_ROOT/.kshard}"
# The test and demo broker: Apache Kafka in KRaft mode, jars from Maven Central.
KAFKA_DEFAULT_VERSION="4.4.0"
# The Kafka 3 broker scripts/test.sh also runs kshard's transactional writer
# against (the last 3.x release; scripts/install.sh installs both).
KAFKA_3_VERSION="3.9.1"
# The broker the scripts run (broker.sh, cluster.sh, Kafka's tools):
# KAFKA_VERSION=$KAFKA_3_VERSION in the environment runs the Kafka 3 one.
KAFKA_VERSION="${KAFKA_VERSION:-$KAFKA_DEFAULT_VERSION}"
KAFKA_HOME="$KSHARD_TOOLS_DIR/kafka-$KAFKA_VERSION"
# The Kafka Streams library, for the tests' streams application (not the
# broker's): of the default version only.
KAFKA_STREAMS_HOME="$KSHARD_TOOLS_DIR/kafka-streams-$KAFKA_DEFAULT_VERSION"
# The RocksDB that Kafka Streams $KAFKA_DEFAULT_VERSION's POM names (its stores' engine).
ROCKSDB_VERSION="10.1.3"
# The library that drives Debian's chromium in the web page's test.
PLAYWRIGHT_VERSION="1.64.1"
# Helm, built from the Go module proxy, for the chart's lint and render test.
HELM_VERSION="4.3.2"

log() { printf '[kshard] %s\n' "$*" >&2; }
die() { printf '[kshard] error: %s\n' "$*" >&2; exit 1; }

# Prints N (default 1) distinct TCP ports on 127.0.0.1 that are free now, one
# per line: all sockets are held open until every port is chosen. They are
# chosen below the kernel's range of ephemeral ports
# (/proc/sys/net/ipv4/ip_local_port_range), so that no process's outgoing
# connection takes one before the service binds it; a service restarted on
# its ports (resume) finds them free for the same reason.
free_ports() {
  local n="${1:-1}" low=32768
  [[ -r /proc/sys/net/ipv4/ip_local_port_range ]] && read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  ((low > 10000 + n)) || low=$((10000 + n + 1))
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$n" "$low" <<'PY'
import random, socket, sys
n, low = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(100_000):
    if len(held) == n:
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randint(10000, low - 1)))
    except OSError:
        s.close()
        continue
    held.append(s)
else:
    sys.exit("no free port on 127.0.0.1 below the ephemeral range")
print("\n".join(str(s.getsockname()[1]) for s in held))
PY
    return
  fi
  local port chosen=()
  while ((${#chosen[@]} < n)); do
    port=$(((RANDOM % (low - 10000)) + 10000))
    if [[ " ${chosen[*]} " != *" $port "* ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      chosen+=("$port")
    fi
  done
  printf '%s\n' "${chosen[@]}"
}

# Prints a TCP port on 127.0.0.1 that is free now.
free_port() { free_ports 1; }

# Prints a random Kafka cluster id in Kafka's form; like Kafka's own
# Uuid.randomUuid, never one that starts with "-" (kafka-storage would read it
# as an option).
new_cluster_id() {
  python3 -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break'
}

# Exports the KEY=VALUE lines a service script printed (values may hold spaces;
# nothing is evaluated).
export_settings() {
  local key value
  while IFS='=' read -r key value; do
    [[ "$key" =~ ^[A-Z_][A-Z0-9_]*$ ]] && export "$key=$value"
  done <<<"$1"
}

# Runs a Kafka tool class from the installed jars: kafka_tool CLASS ARGS…
# (a small, quickly started JVM: tools run for seconds).
kafka_tool() {
  local class="$1"
  shift
  [[ -f "$KAFKA_HOME/.complete" ]] || die "Kafka is not installed: run scripts/install.sh"
  java -Xshare:auto -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
    -Dlog4j2.configurationFile="$KAFKA_HOME/config/log4j2-tools.xml" \
    -cp "$KAFKA_HOME/libs/*" "$class" "$@"
}

# GET http://127.0.0.1:$1$2 over bash's /dev/tcp (no curl needed): prints
# the whole answer, status line and headers first.
http_get() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  timeout 2 cat <&3 || true
  exec 3>&-
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True when the process in PID file $1 is alive.
pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Waits up to 30 s for a service just started: fails with its log's errors
# and tail if the process in PID file $1 exits, succeeds once `$4…` (a
# readiness check) does. $2 names the service in messages, $3 is its log
# file. With PORT_TAKEN_RETURNS set, a service that exited because a port
# chosen for it was bound by another process meanwhile (free_ports gives
# ports free when asked, not when the service binds) returns 2 instead: the
# caller may choose other ports.
wait_until_up() {
  local pidfile="$1" name="$2" logfile="$3"
  shift 3
  for _ in $(seq 300); do
    if ! pid_alive "$pidfile"; then
      rm -f "$pidfile"
      if [[ -n "${PORT_TAKEN_RETURNS:-}" ]] && grep -qiE "address already in use|BindException" "$logfile"; then
        log "$name could not bind a port chosen for it: another process took it meanwhile"
        return 2
      fi
      # The cause first: a JVM logs its whole shutdown after it.
      grep -m 10 -E "ERROR|FATAL|Exception|already in use" "$logfile" >&2 || true
      tail -n 20 "$logfile" >&2 || true
      die "$name exited during start (log above: $logfile)"
    fi
    if "$@"; then
      return 0
    fi
    sleep 0.1
  done
  stop_pid "$pidfile" "$name"
  die "$name did not answer within 30 s (log: $logfile)"
}

# Runs `$2` (a service's start, which waits with wait_until_up) with
# PORT_TAKEN_RETURNS set: when a port chosen for the service was taken by
# another process before it bound it, runs `$3` (which gives the service
# other free ports) and starts it again, 3 starts in all. $1 names the
# service in messages. For a fresh start only: a service resumed keeps its
# ports, which its clients know.
start_choosing_ports() {
  local name="$1" start="$2" choose_again="$3" attempt rc
  for attempt in 1 2 3; do
    rc=0
    PORT_TAKEN_RETURNS=1 "$start" || rc=$?
    ((rc == 0)) && return 0
    ((attempt < 3)) || die "$name's ports were taken at each of 3 starts"
    "$choose_again"
  done
}

# Kills the process in PID file $1 with SIGKILL (a crash, for fault tests) and
# removes the file; $2 names it, $3 says where its data stays.
kill_pid() {
  local pidfile="$1" name="$2" data="$3" pid
  if pid_alive "$pidfile"; then
    pid="$(cat "$pidfile")"
    kill -KILL "$pid"
    # Gone, or a zombie nobody reaps yet: either way it serves no more.
    for _ in $(seq 100); do
      pid_alive "$pidfile" || break
      [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && break
      sleep 0.05
    done
    log "killed $name (pid $pid); its data stays in $data"
  fi
  rm -f "$pidfile"
}

# Stops the process in PID file $1 (TERM, then KILL after 10 s) and removes the file.
stop_pid() {
  local pidfile="$1" name="$2" pid
  if ! [[ -f "$pidfile" ]]; then
    return 0
  fi
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored TERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
}
