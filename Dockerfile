# kshard's container image: the binary only, run as a non-root user.
#   docker build -t kshard .
#   docker run -p 9308:9308 kshard serve --brokers kafka:9092
# Stage 1 builds with the toolchain rust-toolchain.toml pins (librdkafka and
# etcd-client's gRPC code need a C toolchain, perl, pkg-config, OpenSSL's
# headers and protoc); stage 2 is Debian slim with OpenSSL and the CA
# certificates (librdkafka links libssl) and nothing else.
FROM rust:1.95.0-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential perl pkg-config libssl-dev protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kshard \
 && install -D -m 0755 target/release/kshard /out/kshard

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 65532 -g 65532 /var/lib/kshard
COPY --from=build /out/kshard /usr/local/bin/kshard
USER 65532:65532
EXPOSE 9308
VOLUME ["/var/lib/kshard"]
ENTRYPOINT ["/usr/local/bin/kshard"]
CMD ["serve", "--listen", "0.0.0.0:9308"]
