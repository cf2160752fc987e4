.PHONY: test unit bench generate build run

# Every test, with real Redis, PostgreSQL and Cassandra started on loopback.
test:
	bash scripts/test.sh

# Unit tests only: no store needed.
unit:
	go test -race -count=1 ./node/... ./sync/... ./strategy/memory/... ./cmd/...

bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./node/ | tee bench-node.txt
	go tool benchstat bench-node.txt

generate:
	bash scripts/generate.sh

build:
	CGO_ENABLED=0 go build -trimpath -o bin/limiterd ./cmd/limiterd

run:
	go run ./cmd/limiterd
