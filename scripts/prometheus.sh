#!/usr/bin/env bash
# Starts or stops a local Prometheus or Alertmanager on 127.0.0.1: Debian's
# binaries, which scripts/install.sh takes out of their packages.
#   scripts/prometheus.sh start CONFIG   Prometheus with the configuration
#                         file CONFIG (scrape targets, rule files, its
#                         Alertmanagers: the caller's), a fresh data
#                         directory and a free port; prints
#                         KSHARD_PROMETHEUS=127.0.0.1:PORT
#   scripts/prometheus.sh start-alertmanager CONFIG
#                         Alertmanager with CONFIG, alone (no gossip), the
#                         same way; prints KSHARD_ALERTMANAGER=127.0.0.1:PORT
#   scripts/prometheus.sh stop           stops both by PID
#   scripts/prometheus.sh env            prints the settings of what runs
# State lives in $KSHARD_STATE_DIR/prometheus (default .kshard/prometheus).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="$KSHARD_STATE_DIR/prometheus"
bin="$KSHARD_TOOLS_DIR/bin"

# start SERVICE CONFIG: SERVICE is prometheus or alertmanager.
start() {
  local service="$1" config="$2"
  [[ -x "$bin/$service" ]] || die "$service is not installed: run scripts/install.sh"
  [[ -f "$config" ]] || die "no configuration file $config"
  pid_alive "$dir/$service.pid" && die "$service is already running (pid $(cat "$dir/$service.pid"))"
  rm -rf "${dir:?}/$service"
  mkdir -p "$dir/$service"
  free_port >"$dir/$service/port"
  SERVICE="$service" start_choosing_ports "$service" launch choose_other_port
  cat "$dir/$service.env"
}

choose_other_port() {
  : >"$dir/$SERVICE/$SERVICE.log"
  free_port >"$dir/$SERVICE/port"
  log "starting $SERVICE again on port $(cat "$dir/$SERVICE/port")"
}

# Starts $SERVICE on its port and waits until it says it is ready.
launch() {
  local port home="$dir/$SERVICE" args
  port="$(cat "$home/port")"
  if [[ $SERVICE == prometheus ]]; then
    args=(--config.file="$CONFIG_PATH" --storage.tsdb.path="$home/data"
      --web.listen-address="127.0.0.1:$port" --web.enable-lifecycle)
  else
    args=(--config.file="$CONFIG_PATH" --storage.path="$home/data"
      --web.listen-address="127.0.0.1:$port" --cluster.listen-address=)
  fi
  "$bin/$SERVICE" "${args[@]}" >>"$home/$SERVICE.log" 2>&1 &
  echo $! >"$dir/$SERVICE.pid"
  wait_until_up "$dir/$SERVICE.pid" "$SERVICE" "$home/$SERVICE.log" ready "$port" || return
  local key=KSHARD_PROMETHEUS
  [[ $SERVICE == alertmanager ]] && key=KSHARD_ALERTMANAGER
  echo "$key=127.0.0.1:$port" >"$dir/$SERVICE.env"
  log "$SERVICE up (pid $(cat "$dir/$SERVICE.pid")), log: $home/$SERVICE.log"
}

# True once the service on port $1 answers /-/ready with 200.
ready() {
  port_open "$1" && http_get "$1" /-/ready | head -n 1 | grep -q ' 200'
}

case "${1:-}" in
  start | start-alertmanager)
    [[ -n "${2:-}" ]] || die "usage: scripts/prometheus.sh $1 CONFIG"
    CONFIG_PATH="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
    if [[ $1 == start ]]; then start prometheus "$CONFIG_PATH"; else start alertmanager "$CONFIG_PATH"; fi
    ;;
  stop)
    for service in prometheus alertmanager; do
      stop_pid "$dir/$service.pid" "$service"
      rm -f "$dir/$service.env"
    done
    ;;
  env)
    found=
    for service in prometheus alertmanager; do
      if pid_alive "$dir/$service.pid"; then cat "$dir/$service.env"; found=1; fi
    done
    [[ -n $found ]] || die "neither Prometheus nor Alertmanager runs"
    ;;
  *) die "usage: scripts/prometheus.sh start CONFIG|start-alertmanager CONFIG|stop|env" ;;
esac
