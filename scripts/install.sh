#!/usr/bin/env bash
# Installs what kshard's development and tests need, reusing what is there:
#   - Debian packages: etcd-server, etcd-client (etcdctl), protobuf-compiler
#     (the etcd-client crate's build),
#     openssl (the test broker's throwaway CA), python3-aiosmtpd (the
#     notifiers' test's SMTP server),
#     libssl-dev, pkg-config, make, perl (librdkafka's build), python3, a Java 17
#     runtime and Maven (the broker), when missing;
#   - Prometheus, promtool and Alertmanager: the binaries of Debian's
#     packages, into $KSHARD_TOOLS_DIR/bin (the packages are not installed);
#   - Apache Kafka $KAFKA_DEFAULT_VERSION and $KAFKA_3_VERSION (the Kafka 3 broker
#     the suite also tests the transactional writer on; and $KAFKA_VERSION when
#     the environment names another): each broker's jars and their
#     dependencies, fetched from Maven Central with Maven into
#     $KSHARD_TOOLS_DIR once (about 55 MB each), plus log4j2 configurations
#     for the broker and Kafka's tools;
#   - the pinned Rust toolchain, linked to the machine's own stable when rustup
#     has no toolchain of that name (nothing is downloaded);
#   - helm $HELM_VERSION, built from the Go module proxy with the machine's Go
#     into $KSHARD_TOOLS_DIR once, for the chart's test;
#   - for the web page's test in a real browser: Debian's chromium and Node.js,
#     and playwright-core $PLAYWRIGHT_VERSION from npm into $KSHARD_TOOLS_DIR
#     (it drives the installed chromium; it downloads no browser).
# Usage: scripts/install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_apt=()
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
# etcdctl: scripts/etcd.sh start --secure turns authentication on with it.
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# etcd-client's build generates its gRPC code with protoc.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v perl >/dev/null 2>&1 || need_apt+=(perl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# The notifiers' test: a local SMTP server that requires STARTTLS and a password.
/usr/bin/python3 -c 'import aiosmtpd' >/dev/null 2>&1 || need_apt+=(python3-aiosmtpd)
# Kafka 4 needs Java 17 or newer.
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
if ! command -v java >/dev/null 2>&1 || (($(java_major || echo 0) < 17)); then
  need_apt+=(default-jre-headless)
fi
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if ((${#need_apt[@]})); then
  log "installing Debian packages: ${need_apt[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The toolchain rust-toolchain.toml pins: link the machine's stable under that
# name when rustup lacks it and stable is that version (no download).
pinned="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$KSHARD_ROOT/rust-toolchain.toml")"
if command -v rustup >/dev/null 2>&1 && ! rustup toolchain list | grep -q "^$pinned"; then
  stable_rustc="$(rustup which --toolchain stable rustc 2>/dev/null || true)"
  if [[ -n "$stable_rustc" ]] && "$stable_rustc" --version | grep -q "^rustc $pinned "; then
    log "linking the machine's stable Rust as the pinned $pinned"
    rustup toolchain link "$pinned" "$(dirname "$(dirname "$stable_rustc")")"
  fi
fi

# Installs broker $1 into $2.
install_kafka() {
  local version="$1" home="$2" work
  work="$(mktemp -d "${TMPDIR:-/tmp}/kshard-kafka-install.XXXXXX")"
  trap 'rm -rf "$work"' RETURN
  # The broker (kafka_2.13), Kafka's command-line tools (kafka-consumer-groups,
  # kafka-acls) and log4j2 behind slf4j 1.x, which Kafka 4 logs through; and
  # Kafka 3 too, its slf4j binding to reload4j left out (slf4j would pick one
  # of two at random): one log configuration for both.
  cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kshard</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version>
      <exclusions><exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version>
      <exclusions><exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Apache Kafka $version from Maven Central into $home (done once)"
  rm -rf "$home"
  mkdir -p "$home/libs" "$home/config"
  (cd "$work" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$home/libs") || die "Maven could not fetch Kafka $version (see above)"
  # The broker logs to its data directory; tools log warnings to stderr only.
  cat >"$home/config/log4j2.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="info"/>
    <Logger name="org.apache.kafka" level="info"/>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="state.change.logger" level="warn"/>
    <Logger name="kafka.authorizer.logger" level="warn"/>
    <Root level="info"><AppenderRef ref="stdout"/></Root>
  </Loggers>
</Configuration>
XML
  cat >"$home/config/log4j2-tools.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="warn"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
XML
  [[ -f "$home/libs/kafka_2.13-$version.jar" ]] || die "Kafka's jars did not install to $home/libs"
  touch "$home/.complete"
}

(($(java_major || echo 0) >= 17)) || die "Kafka $KAFKA_DEFAULT_VERSION needs Java 17 or newer; java -version says $(java_major)"
mkdir -p "$KSHARD_TOOLS_DIR"
# One install at a time: a second run waits, then finds Kafka installed.
exec 9>"$KSHARD_TOOLS_DIR/.install.lock"
flock 9
for version in $(printf '%s\n' "$KAFKA_DEFAULT_VERSION" "$KAFKA_3_VERSION" "$KAFKA_VERSION" | sort -u); do
  if [[ -f "$KSHARD_TOOLS_DIR/kafka-$version/.complete" ]]; then
    log "Apache Kafka $version found at $KSHARD_TOOLS_DIR/kafka-$version"
  else
    install_kafka "$version" "$KSHARD_TOOLS_DIR/kafka-$version"
  fi
done

# Kafka Streams (its jar and RocksDB's: the rest is Kafka's), for the test
# application on the streams rebalance protocol and the side-by-side bench
# (`kshard bench runtime --streams-app`, whose stores are RocksDB's).
if [[ -f "$KAFKA_STREAMS_HOME/.complete" && -n "$(ls "$KAFKA_STREAMS_HOME"/rocksdbjni-*.jar 2>/dev/null)" ]]; then
  log "Kafka Streams $KAFKA_DEFAULT_VERSION found at $KAFKA_STREAMS_HOME"
else
  log "fetching Kafka Streams $KAFKA_DEFAULT_VERSION from Maven Central into $KAFKA_STREAMS_HOME (done once)"
  rm -rf "$KAFKA_STREAMS_HOME"
  mkdir -p "$KAFKA_STREAMS_HOME"
  mvn -q -B dependency:copy -Dartifact="org.apache.kafka:kafka-streams:$KAFKA_DEFAULT_VERSION" \
    -DoutputDirectory="$KAFKA_STREAMS_HOME" || die "Maven could not fetch Kafka Streams $KAFKA_DEFAULT_VERSION (see above)"
  mvn -q -B dependency:copy -Dartifact="org.rocksdb:rocksdbjni:$ROCKSDB_VERSION" \
    -DoutputDirectory="$KAFKA_STREAMS_HOME" || die "Maven could not fetch RocksDB for Kafka Streams (see above)"
  [[ -f "$KAFKA_STREAMS_HOME/kafka-streams-$KAFKA_DEFAULT_VERSION.jar" ]] || die "Kafka Streams did not install to $KAFKA_STREAMS_HOME"
  touch "$KAFKA_STREAMS_HOME/.complete"
fi

# Prometheus, its rule checker promtool and Alertmanager, for the tests of
# deploy/prometheus and of the published dashboards and alerts against a live
# Prometheus: the static binaries taken out of Debian's prometheus and
# prometheus-alertmanager packages into $KSHARD_TOOLS_DIR/bin, without
# installing the packages or starting their services.
# debian_binary PACKAGE PATH-IN-PACKAGE NAME [SHARED-DIR]: the file as
# $KSHARD_TOOLS_DIR/bin/NAME, and the package's folder SHARED-DIR (the
# binary reads it at its absolute path) where it is missing.
debian_binary() {
  local package="$1" inside="$2" name="$3" shared="${4:-}" tmp as_root=()
  if [[ -x "$KSHARD_TOOLS_DIR/bin/$name" ]] && [[ -z "$shared" || -d "/$shared" ]]; then
    log "$name found"
    return
  fi
  log "taking $name out of Debian's $package package"
  tmp="$(mktemp -d)"
  [[ $(id -u) -eq 0 ]] || as_root=(sudo -n)
  fetch() { (cd "$tmp" && apt-get download "$package" >/dev/null 2>&1); }
  if fetch || { "${as_root[@]}" apt-get update -qq >/dev/null 2>&1 && fetch; }; then
    dpkg-deb -x "$tmp/${package}"_*.deb "$tmp/x"
    mkdir -p "$KSHARD_TOOLS_DIR/bin"
    cp "$tmp/x/$inside" "$KSHARD_TOOLS_DIR/bin/$name"
    if [[ -n "$shared" && ! -d "/$shared" ]]; then
      log "copying Debian's /$shared (what $name reads there)"
      "${as_root[@]}" mkdir -p "/$(dirname "$shared")"
      "${as_root[@]}" cp -r "$tmp/x/$shared" "/$shared"
    fi
  else
    rm -rf "$tmp"
    die "Debian's $package package could not be downloaded (apt-get download $package)"
  fi
  rm -rf "$tmp"
}
debian_binary prometheus usr/bin/promtool promtool
debian_binary prometheus usr/bin/prometheus prometheus
# Debian's Alertmanager reads its default notification templates from
# /usr/share/prometheus/alertmanager, where its package puts them.
debian_binary prometheus-alertmanager usr/bin/prometheus-alertmanager alertmanager usr/share/prometheus/alertmanager

# Helm, for the test of the chart in deploy/helm (helm lint, helm template):
# built with the machine's Go from the Go module proxy into the tools cache
# once (a few minutes; the only Go build of the suite).
helm_dir="$KSHARD_TOOLS_DIR/helm-$HELM_VERSION"
if [[ -x "$helm_dir/helm" ]]; then
  log "helm $HELM_VERSION found"
elif command -v go >/dev/null 2>&1; then
  log "building helm $HELM_VERSION from the Go module proxy into $helm_dir (done once)"
  GOBIN="$helm_dir" GOFLAGS=-mod=mod go install "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION" ||
    die "go install helm.sh/helm/v4/cmd/helm@v$HELM_VERSION failed (see above)"
else
  log "Go is not installed: the chart's test (helm lint, helm template) is skipped"
fi
if [[ -x "$helm_dir/helm" ]]; then
  mkdir -p "$KSHARD_TOOLS_DIR/bin"
  ln -sf "$helm_dir/helm" "$KSHARD_TOOLS_DIR/bin/helm"
fi

# playwright-core drives Debian's chromium in the page's end-to-end test
# (crates/lag/tests/page.rs); only the library, no browser download.
playwright="$KSHARD_TOOLS_DIR/node-$PLAYWRIGHT_VERSION"
node_major="$(node --version 2>/dev/null | sed -n 's/^v\([0-9]*\).*/\1/p' || true)"
if ((${node_major:-0} < 20)); then
  die "playwright-core $PLAYWRIGHT_VERSION needs Node.js 20 or newer; node --version says ${node_major:-nothing} (install a newer nodejs, e.g. from Debian backports or NodeSource)"
fi
if [[ -f "$playwright/node_modules/playwright-core/package.json" ]]; then
  log "playwright-core $PLAYWRIGHT_VERSION found"
else
  log "fetching playwright-core $PLAYWRIGHT_VERSION from npm into $playwright"
  mkdir -p "$playwright"
  (cd "$playwright" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --silent --no-audit --no-fund \
    --prefix "$playwright" "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null) ||
    die "npm could not install playwright-core $PLAYWRIGHT_VERSION (see above)"
fi
