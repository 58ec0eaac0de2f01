#!/usr/bin/env bash
# Starts or stops a local etcd on 127.0.0.1.
#   scripts/etcd.sh start   fresh data directory, free ports; prints KSHARD_ETCD=…
#   scripts/etcd.sh stop    stops it by PID
#   scripts/etcd.sh kill    kills it with SIGKILL, keeping its data
#   scripts/etcd.sh resume  starts it again on the same data and ports
#   scripts/etcd.sh env     prints KSHARD_ETCD=… of the running etcd
# State lives in $KSHARD_STATE_DIR/etcd (default .kshard/etcd).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="$KSHARD_STATE_DIR/etcd"
pidfile="$KSHARD_STATE_DIR/etcd.pid"
envfile="$KSHARD_STATE_DIR/etcd.env"

start() {
  command -v etcd >/dev/null 2>&1 || die "etcd is not installed: run scripts/install.sh"
  if pid_alive "$pidfile"; then
    die "an etcd is already running (pid $(cat "$pidfile")); run scripts/etcd.sh stop first"
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  local client peer
  { read -r client; read -r peer; } < <(free_ports 2)
  printf '%s %s\n' "$client" "$peer" >"$dir/ports"
  launch
}

# Starts etcd on the data directory and ports in $dir, and waits until healthy.
launch() {
  local client peer
  read -r client peer <"$dir/ports"
  etcd --name kshard-dev --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "kshard-dev=http://127.0.0.1:$peer" \
    >>"$dir/etcd.log" 2>&1 &
  echo $! >"$pidfile"
  wait_until_up "$pidfile" etcd "$dir/etcd.log" healthy "$client"
  echo "KSHARD_ETCD=http://127.0.0.1:$client" >"$envfile"
  log "etcd up (pid $(cat "$pidfile")), log: $dir/etcd.log"
  cat "$envfile"
}

# True once etcd on port $1 answers /health with {"health":"true"} (it has a leader).
healthy() {
  port_open "$1" && health "$1" | grep -q '"health":"true"'
}

# GET /health over bash's /dev/tcp (no curl needed).
health() {
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  timeout 2 cat <&3 || true
  exec 3>&-
}

case "${1:-}" in
  start) start ;;
  stop) stop_pid "$pidfile" etcd; rm -f "$envfile" ;;
  kill) kill_pid "$pidfile" "etcd" "$dir" ;;
  resume)
    [[ -f "$dir/ports" ]] || die "no etcd data to resume in $dir"
    pid_alive "$pidfile" && die "etcd is running (pid $(cat "$pidfile"))"
    launch
    ;;
  env) [[ -f "$envfile" ]] && pid_alive "$pidfile" || die "no etcd running"; cat "$envfile" ;;
  *) die "usage: scripts/etcd.sh start|stop|kill|resume|env" ;;
esac
