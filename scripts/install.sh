#!/usr/bin/env bash
# Installs what kshard's development and tests need, reusing what is there:
#   - Debian packages: etcd-server, protobuf-compiler, libprotobuf-dev (tansu's
#     build), libssl-dev, pkg-config, make, perl (librdkafka's build), python3;
#   - the tansu broker, built once into $KSHARD_TOOLS_DIR (~30 minutes on 2 cores).
# Usage: scripts/install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_apt=()
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
dpkg -s libprotobuf-dev >/dev/null 2>&1 || need_apt+=(libprotobuf-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v perl >/dev/null 2>&1 || need_apt+=(perl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
if ((${#need_apt[@]})); then
  log "installing Debian packages: ${need_apt[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [[ -x "$TANSU_BIN" ]]; then
  log "tansu $TANSU_VERSION found at $TANSU_BIN"
else
  log "building tansu $TANSU_VERSION into $KSHARD_TOOLS_DIR (about 30 minutes on 2 cores; done once)"
  mkdir -p "$KSHARD_TOOLS_DIR"
  CARGO_TARGET_DIR="$KSHARD_TOOLS_DIR/build" cargo install tansu --version "$TANSU_VERSION" --locked \
    --no-default-features --features dynostore,libsql --root "$KSHARD_TOOLS_DIR/tansu-$TANSU_VERSION"
  rm -rf "$KSHARD_TOOLS_DIR/build"
  [[ -x "$TANSU_BIN" ]] || die "tansu did not install to $TANSU_BIN"
fi
