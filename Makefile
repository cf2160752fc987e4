.PHONY: test unit bench generate build run cluster compose-test

# Every test, with real Redis, PostgreSQL and Cassandra started on loopback.
test:
	bash scripts/test.sh

# Every package's tests, without the integration tag. A store package's
# tests use LIMITERD_TEST_REDIS/_POSTGRES/_CASSANDRA, or start a private
# server when one is installed, or skip.
unit:
	go test -race -count=1 ./...

bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./node/ | tee bench-node.txt
	go tool benchstat bench-node.txt

generate:
	bash scripts/generate.sh

build:
	CGO_ENABLED=0 go build -trimpath -o bin/limiterd ./cmd/limiterd

run:
	go run ./cmd/limiterd

# A three-node cluster and its store on loopback, without Docker, with the
# configs of deploy/ (store addresses rewritten); Ctrl-C stops it all.
#   make cluster STORE=postgres CLUSTER_FLAGS='-base-port 8000'
# Built, then run: `go run` exits 1 after a Ctrl-C whatever the command's
# own exit status.
STORE ?= redis
cluster:
	go build -o bin/limiterd-cluster ./integration/harness/cmd/cluster
	bin/limiterd-cluster -store $(STORE) $(CLUSTER_FLAGS)

# The compose cluster on a real Docker engine (installed and started when
# missing): images built by scripts/images.sh, then the tests of
# integration/compose; containers and the engine are stopped at the end.
compose-test:
	bash scripts/compose-test.sh
