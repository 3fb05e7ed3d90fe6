# The apbridge relay as a container image (docs/operations.md,
# "Container"): a static binary on an empty base with the CA
# certificates, run as a non-root user. `make image` builds it, stamped
# as `make release` stamps (VERSION, COMMIT, BUILD_DATE, MODIFIED).
#
#   docker run -v /srv/apbridge:/etc/apbridge:ro -p 9464:9464 apbridge:TAG
#
# The config is read from /etc/apbridge/apbridge.yaml: mount the directory
# (files it names, such as NATS credentials or OPC UA certificates, can
# live beside it). Give http.listen ":9464" (the default) or change the
# HEALTHCHECK's URL.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION= COMMIT= BUILD_DATE= MODIFIED=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE} -X main.modified=${MODIFIED}" \
      -o /out/apbridge ./cmd/apbridge \
 && mkdir -p /out/etc/apbridge /out/var/lib/apbridge

FROM scratch
# TLS to NATS, gateways and OPC UA servers verifies against the system's
# CA certificates (a config can name its own CA file as well).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/apbridge /usr/local/bin/apbridge
# /var/lib/apbridge: writable by the relay's user, for OPC UA client
# certificates the relay generates (mount a volume there to keep them).
COPY --from=build --chown=65532:65532 /out/var/lib/apbridge /var/lib/apbridge
COPY --from=build /out/etc/apbridge /etc/apbridge
USER 65532:65532
WORKDIR /var/lib/apbridge
EXPOSE 9464
# /healthz: the relay is alive (its main loop passes); /readyz would also
# fail while a source's servers are down, which a restart cannot fix.
HEALTHCHECK --interval=30s --timeout=10s --start-period=2m --retries=3 \
  CMD ["/usr/local/bin/apbridge", "health", "--url", "http://127.0.0.1:9464/healthz", "--timeout", "5s"]
ENTRYPOINT ["/usr/local/bin/apbridge"]
CMD ["run", "--config", "/etc/apbridge/apbridge.yaml"]
