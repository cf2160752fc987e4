# syntax=docker/dockerfile:1
# Build: a static binary, exactly as `make build` does.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/limiterd ./cmd/limiterd

# Run: no shell, no package manager, a non-root user; nothing fetched at run time.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/limiterd /usr/local/bin/limiterd
USER nonroot:nonroot
EXPOSE 7070 7071
ENV LIMITERD_GRPC_ADDR=0.0.0.0:7070 LIMITERD_HTTP_ADDR=0.0.0.0:7071
HEALTHCHECK --interval=5s --timeout=2s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/limiterd", "probe", "http://127.0.0.1:7071/readyz"]
ENTRYPOINT ["/usr/local/bin/limiterd"]
