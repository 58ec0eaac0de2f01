#!/usr/bin/env bash
# Starts or stops a local etcd on 127.0.0.1.
#   scripts/etcd.sh start   fresh data directory, free ports; prints KSHARD_ETCD=…
#   scripts/etcd.sh start --secure
#                           the same, but clients must use TLS (a throwaway CA made
#                           with openssl; client certificates verified) and
#                           authenticate: user root, and user kshard whose role may
#                           read and write under /kshard/ only. Prints
#                           KSHARD_ETCD=https://…, KSHARD_ETCD_CA, KSHARD_ETCD_CERT,
#                           KSHARD_ETCD_KEY (a client certificate), KSHARD_ETCD_USER
#                           and KSHARD_ETCD_PASSWORD (random per start), and
#                           KSHARD_ETCD_ROOT_PASSWORD.
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
  if [[ "${1:-}" == --secure ]]; then
    command -v etcdctl >/dev/null 2>&1 || die "etcdctl is not installed: run scripts/install.sh"
    mkdir -p "$dir/tls"
    make_certificates "$dir/tls"
    touch "$dir/secure"
  fi
  start_choosing_ports etcd launch choose_other_ports
  [[ -f "$dir/secure" ]] && enable_auth
  cat "$envfile"
}

# Gives etcd free ports, on a new data directory and log: its data names
# its peer port.
choose_other_ports() {
  rm -rf "$dir/data"
  : >"$dir/etcd.log"
  free_ports 2 | paste -sd' ' >"$dir/ports"
  log "starting etcd again on ports $(cat "$dir/ports")"
}

# Starts etcd on the data directory and ports in $dir, and waits until healthy.
launch() {
  local client peer scheme=http
  read -r client peer <"$dir/ports"
  local tls=()
  if [[ -f "$dir/secure" ]]; then
    scheme=https
    tls=(--cert-file "$dir/tls/server.crt" --key-file "$dir/tls/server.key"
      --trusted-ca-file "$dir/tls/ca.pem" --client-cert-auth)
  fi
  etcd --name kshard-dev --data-dir "$dir/data" \
    --listen-client-urls "$scheme://127.0.0.1:$client" --advertise-client-urls "$scheme://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "kshard-dev=http://127.0.0.1:$peer" "${tls[@]}" \
    >>"$dir/etcd.log" 2>&1 &
  echo $! >"$pidfile"
  wait_until_up "$pidfile" etcd "$dir/etcd.log" healthy "$client" || return
  echo "KSHARD_ETCD=$scheme://127.0.0.1:$client" >"$envfile"
  if [[ -f "$dir/secure" ]]; then
    {
      echo "KSHARD_ETCD_CA=$dir/tls/ca.pem"
      echo "KSHARD_ETCD_CERT=$dir/tls/client.crt"
      echo "KSHARD_ETCD_KEY=$dir/tls/client.key"
      echo "KSHARD_ETCD_USER=kshard"
      cat "$dir/passwords"
    } >>"$envfile" 2>/dev/null || true
  fi
  log "etcd up (pid $(cat "$pidfile")), log: $dir/etcd.log"
}

# A CA, a server certificate for 127.0.0.1 and a client certificate, valid for 7 days.
make_certificates() {
  local tls="$1"
  (
    cd "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
      -subj "/CN=kshard test etcd CA" -keyout ca.key -out ca.pem 2>/dev/null
    for who in server client; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=$who" -keyout "$who.key" -out "$who.csr" 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$who.ext"
      openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 7 \
        -extfile "$who.ext" -out "$who.crt" 2>/dev/null
    done
    chmod 644 ca.pem client.crt client.key
  ) || die "making etcd's test certificates with openssl failed"
}

# Users root and kshard (a role that may read and write under /kshard/ only),
# then authentication on; their passwords, random, in $dir/passwords.
enable_auth() {
  local client root kshard
  read -r client _ <"$dir/ports"
  root="$(openssl rand -hex 16)"
  kshard="$(openssl rand -hex 16)"
  ctl() {
    ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$client" --cacert "$dir/tls/ca.pem" \
      --cert "$dir/tls/client.crt" --key "$dir/tls/client.key" "$@" >>"$dir/auth.log" 2>&1
  }
  {
    ctl user add "root:$root" &&
      ctl role add kshard &&
      ctl role grant-permission kshard --prefix=true readwrite /kshard/ &&
      ctl user add "kshard:$kshard" &&
      ctl user grant-role kshard kshard &&
      ctl auth enable
  } || die "turning etcd's authentication on failed: see $dir/auth.log"
  printf 'KSHARD_ETCD_PASSWORD=%s\nKSHARD_ETCD_ROOT_PASSWORD=%s\n' "$kshard" "$root" >"$dir/passwords"
  cat "$dir/passwords" >>"$envfile"
}

# True once etcd on port $1 answers /health with {"health":"true"} (it has a
# leader); with TLS, once etcdctl's health check passes.
healthy() {
  port_open "$1" || return 1
  if [[ -f "$dir/secure" ]]; then
    ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$1" --cacert "$dir/tls/ca.pem" \
      --cert "$dir/tls/client.crt" --key "$dir/tls/client.key" endpoint health >/dev/null 2>&1
  else
    http_get "$1" /health | grep -q '"health":"true"'
  fi
}

case "${1:-}" in
  start) start "${2:-}" ;;
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
