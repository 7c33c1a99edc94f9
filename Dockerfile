# Multi-stage build: compile in the Rust image, run from a slim Debian with only the binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin bucketd

FROM debian:bookworm-slim
# ca-certificates: TLS to managed MongoDB (mongodb+srv URIs).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data bucketd \
    && mkdir -p /data && chown bucketd /data
COPY --from=build /src/target/release/bucketd /usr/local/bin/bucketd
USER bucketd
# The embedded store (the default when no MongoDB URI is set) keeps its files here.
ENV BUCKETD_HTTP_ADDR=0.0.0.0:8080 \
    BUCKETD_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8080 8094
ENTRYPOINT ["bucketd"]
