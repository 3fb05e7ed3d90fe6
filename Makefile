# apbridge: make test runs what CI runs; make demo shows the product on the
# embedded cluster. Only Go is needed: everything else comes from the Go
# module proxy.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 9m
BENCH_ARGS  ?=

.PHONY: all test vet demo bench lint fmt build clean

all: test

## test: vet, then every test with the race detector (what CI runs).
test: vet
	$(GO) test $(TEST_FLAGS) ./...

vet:
	$(GO) vet ./...

## demo: run the scripted maintenance demo on the embedded cluster.
demo:
	$(GO) run ./cmd/apbridge-lab demo

## bench: run every apbridge bench scenario and the Go benchmarks.
bench:
	$(GO) run ./cmd/apbridge-lab bench $(BENCH_ARGS)
	$(GO) test -run '^$$' -bench . -benchmem ./...

## lint: gofmt, vet and staticcheck.
lint: vet
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

fmt:
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')

## build: the relay (apbridge) and the lab (apbridge-lab: demo, bench) in
## ./bin (not committed).
build:
	$(GO) build -o bin/apbridge ./cmd/apbridge
	$(GO) build -o bin/apbridge-lab ./cmd/apbridge-lab

clean:
	rm -rf bin
