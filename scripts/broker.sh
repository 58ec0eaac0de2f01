#!/usr/bin/env bash
# Starts or stops a local tansu broker (sqlite storage) on 127.0.0.1.
#   scripts/broker.sh start   fresh data directory, free port; prints KSHARD_BROKERS=…
#   scripts/broker.sh stop    stops it by PID
#   scripts/broker.sh env     prints KSHARD_BROKERS=… of the running broker
# State lives in $KSHARD_STATE_DIR/broker (default .kshard/broker).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="$KSHARD_STATE_DIR/broker"
pidfile="$KSHARD_STATE_DIR/broker.pid"
envfile="$KSHARD_STATE_DIR/broker.env"

start() {
  [[ -x "$TANSU_BIN" ]] || die "tansu is not installed: run scripts/install.sh"
  if pid_alive "$pidfile"; then
    die "a broker is already running (pid $(cat "$pidfile")); run scripts/broker.sh stop first"
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  local port
  port="$(free_port)"
  # tansu resolves a sqlite:// path against its working directory.
  (
    cd "$dir"
    exec "$TANSU_BIN" broker \
      --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine "sqlite://tansu.db" \
      >"$dir/broker.log" 2>&1
  ) &
  echo $! >"$pidfile"
  wait_until_up "$pidfile" broker "$dir/broker.log" answers "$port"
  echo "KSHARD_BROKERS=127.0.0.1:$port" >"$envfile"
  log "broker up (pid $(cat "$pidfile")), log: $dir/broker.log"
  cat "$envfile"
}

# True once the broker on port $1 answers a Metadata request.
answers() {
  port_open "$1" && "$TANSU_BIN" topic list --broker "tcp://127.0.0.1:$1" >/dev/null 2>&1
}

case "${1:-}" in
  start) start ;;
  stop) stop_pid "$pidfile" broker; rm -f "$envfile" ;;
  env) [[ -f "$envfile" ]] && pid_alive "$pidfile" || die "no broker running"; cat "$envfile" ;;
  *) die "usage: scripts/broker.sh start|stop|env" ;;
esac
