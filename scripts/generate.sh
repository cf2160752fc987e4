#!/usr/bin/env bash
# Regenerates the Go code of limiterd's gRPC API from api/proto (run by
# `make generate`), and its HTTP/JSON gateway with the OpenAPI document
# that describes it (api/proto/limiter/v1/limiterv1gw). The generated files
# are kept in the repository.
#
#   scripts/generate.sh          regenerate (files that did not change are
#                                left untouched)
#   scripts/generate.sh --check  regenerate into a temporary directory and
#                                fail if the files in the tree differ
#
# Needs protoc (Debian: apt-get install protobuf-compiler, which also brings
# the google/protobuf/*.proto well-known types). It is installed with apt-get
# when missing and running as root. The Go plugins are installed at the
# pinned versions below into GOBIN (default: $(go env GOPATH)/bin) when
# missing or at another version, and are called by path, so PATH does not
# matter. The same versions give byte-identical output: the generated headers
# name them.
set -euo pipefail

PROTOC_VERSION="${PROTOC_VERSION:-3.21.12}" # Debian 12's protobuf-compiler
PROTOC_GEN_GO_VERSION="${PROTOC_GEN_GO_VERSION:-v1.36.12}"         # = google.golang.org/protobuf in go.mod
PROTOC_GEN_GO_GRPC_VERSION="${PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}" # needs google.golang.org/grpc >= v1.64
# = github.com/grpc-ecosystem/grpc-gateway/v2 in go.mod (the runtime the gateway calls)
GRPC_GATEWAY_VERSION="${GRPC_GATEWAY_VERSION:-v2.33.0}"

cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
"") ;;
--check) check=true ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

log() { echo "generate: $*" >&2; }

# --- protoc ---
if ! command -v protoc >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		log "installing protobuf-compiler"
		apt-get install -y -qq protobuf-compiler >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null; }
	else
		log "protoc not found: install protobuf-compiler (protoc $PROTOC_VERSION)"
		exit 1
	fi
fi
have_protoc="$(protoc --version | awk '{print $2}')"
if [ "$have_protoc" != "$PROTOC_VERSION" ]; then
	log "warning: protoc $have_protoc, expected $PROTOC_VERSION: the generated headers will differ"
fi

# --- Go plugins ---
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"

# ensure_plugin NAME PACKAGE VERSION: install NAME at VERSION into gobin
# unless it is already there at that version.
ensure_plugin() {
	local name="$1" pkg="$2" want="$3" have=""
	if [ -x "$gobin/$name" ]; then
		# "protoc-gen-go v1.36.12", "protoc-gen-go-grpc 1.6.2" or
		# "Version v2.33.0, commit ..."
		have="$("$gobin/$name" --version 2>/dev/null | awk '{print $2}')" || true
		have="v${have#v}"
		have="${have%,}"
	fi
	if [ "$have" != "$want" ]; then
		log "installing $name $want into $gobin"
		# Outside the module, so that go.mod and go.sum are not touched.
		(cd / && GOBIN="$gobin" GOFLAGS=-buildvcs=false go install "$pkg@$want")
	fi
}
ensure_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
ensure_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
ensure_plugin protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway "$GRPC_GATEWAY_VERSION"
ensure_plugin protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 "$GRPC_GATEWAY_VERSION"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# protoc-gen-go-vtproto is built from the vtprotobuf version go.mod selects,
# so the generated fast paths always match the runtime library they call.
go build -o "$tmp/bin/protoc-gen-go-vtproto" github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto

# --- generate ---
# Sources are named relative to api/proto; api/proto/third_party holds the
# imported .proto files that protoc does not ship (google/rpc/status.proto),
# which are only imported: their Go packages exist already.
protos=(limiter/v1/limiter.proto)

mkdir -p "$tmp/out"
protoc \
	--plugin=protoc-gen-go="$gobin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
	--plugin=protoc-gen-go-vtproto="$tmp/bin/protoc-gen-go-vtproto" \
	-I api/proto \
	-I api/proto/third_party \
	--go_out="$tmp/out" --go_opt=paths=source_relative \
	--go-grpc_out="$tmp/out" --go-grpc_opt=paths=source_relative \
	--go-vtproto_out="$tmp/out" --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
	"${protos[@]}"

# The admin API (limiter.admin.v1) is served on the admin listener only:
# plain Go code, no fast paths and no gateway.
protoc \
	--plugin=protoc-gen-go="$gobin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
	-I api/proto \
	-I api/proto/third_party \
	--go_out="$tmp/out" --go_opt=paths=source_relative \
	--go-grpc_out="$tmp/out" --go-grpc_opt=paths=source_relative \
	limiter/admin/v1/admin.proto

# The HTTP/JSON gateway and its OpenAPI (Swagger 2.0) document need no
# google.api.http annotations: generate_unbound_methods maps every RPC to
# POST /limiter.v1.RateLimiter/<Method> with the request as the JSON body.
# The gateway is standalone, in a package of its own, so that importing
# the API's messages does not import the gateway's runtime; the plugin names
# that package after the API's (limiterv1), and it is renamed limiterv1gw.
gw=limiter/v1/limiterv1gw
mkdir -p "$tmp/gw" "$tmp/out/$gw"
protoc \
	--plugin=protoc-gen-grpc-gateway="$gobin/protoc-gen-grpc-gateway" \
	--plugin=protoc-gen-openapiv2="$gobin/protoc-gen-openapiv2" \
	-I api/proto \
	-I api/proto/third_party \
	--grpc-gateway_out="$tmp/gw" \
	--grpc-gateway_opt=paths=source_relative,standalone=true,generate_unbound_methods=true,omit_package_doc=true \
	--openapiv2_out="$tmp/gw" \
	--openapiv2_opt=generate_unbound_methods=true \
	"${protos[@]}"
sed '0,/^package limiterv1$/s//package limiterv1gw/' "$tmp/gw/limiter/v1/limiter.pb.gw.go" >"$tmp/out/$gw/limiter.pb.gw.go"
cp "$tmp/gw/limiter/v1/limiter.swagger.json" "$tmp/out/$gw/limiter.swagger.json"

status=0
while IFS= read -r -d '' f; do
	rel="${f#"$tmp/out"/}"
	dst="api/proto/$rel"
	if cmp -s "$f" "$dst"; then
		continue
	fi
	if $check; then
		log "$dst is out of date: run scripts/generate.sh"
		status=1
	else
		mkdir -p "$(dirname "$dst")"
		cp "$f" "$dst"
		log "wrote $dst"
	fi
done < <(find "$tmp/out" -type f \( -name '*.go' -o -name '*.json' \) -print0 | sort -z)
exit "$status"
