# The rally binary in a small runtime image: `rally server` as an Agones game server.
#   docker build -t rally:dev .
#   docker run --rm rally:dev --version
# The build stage compiles the product binary only (crates/app's `rally`, no benchmarks, no
# peers); the runtime stage is distroless (glibc, CA certificates, no shell) and runs as the
# unprivileged user `nonroot` (uid 65532). deploy/agones/fleet.yaml runs it on Agones
# (docs/operating.md, "Running on Agones").

# The latest stable Rust on Debian 12, the runtime image's base (the same glibc).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The `dist` profile: release with whole-program LTO (Cargo.toml; docs/benchmarks.md, "The
# shipped build").
RUN cargo build --profile dist --locked -p rally --bin rally \
    && strip target/dist/rally

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/dist/rally /usr/local/bin/rally
COPY deploy/agones/server.toml /etc/rally/server.toml
USER nonroot:nonroot
# Worker k listens on UDP 7777 + k (deploy/agones/server.toml); telemetry on TCP 9100.
EXPOSE 7777-7778/udp 9100/tcp
ENTRYPOINT ["/usr/local/bin/rally"]
CMD ["server", "--config", "/etc/rally/server.toml", "--agones"]
