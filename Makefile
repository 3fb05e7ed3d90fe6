# apbridge: make test runs what CI runs; make demo shows the product on the
# embedded cluster. Go is needed; the interop tests also need Node.js (npm
# installs node-opcua, the independent OPC UA server, from the project's
# pinned lock file). Without Node.js they are skipped with a message, except
# under CI, where they fail.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 9m
BENCH_ARGS  ?=

.PHONY: all test vet windows demo bench soak soak-fleet lint fmt build clean interop-deps proto fuzz fuzz-smoke release image

all: test

## test: vet (for Linux and Windows), then every test with the race
## detector (what CI runs; the fuzz targets' seed corpora run as ordinary
## tests), then each fuzz target briefly.
test: vet windows interop-deps
	$(GO) test $(TEST_FLAGS) ./...
	$(MAKE) fuzz-smoke

## windows: vet the relay's packages for Windows and build the relay for
## windows/amd64, where it runs as a service (nothing is kept). Only what
## the binary links is vetted: the test servers (nats-server, node-opcua's
## harness) never run on Windows, and vetting them too would double the
## cold-cache compile time.
windows:
	GOOS=windows GOARCH=amd64 $(GO) vet $$(GOOS=windows $(GO) list -deps ./cmd/apbridge | grep '^github.com/apbridge/apbridge')
	GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/apbridge

## fuzz: run each fuzz target for FUZZTIME (default 1m); a failing input
## is saved under the package's testdata/fuzz and fails the seed tests
## from then on.
FUZZTIME ?= 1m
FUZZ_TARGETS := wire:FuzzCodecRoundTrip wire:FuzzDecodeJSON wire:FuzzEscapeToken \
	wire:FuzzMapperSubject bridge/opcuasource:FuzzValidateNodeID relay:FuzzExpandValue relay:FuzzParse \
	bridge:FuzzDecodeWrite bridge:FuzzSnapshotRequest
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

## fuzz-smoke: every fuzz target for a few hundred inputs, part of make
## test. A count, not a duration: with a duration, Go 1.26's fuzzing
## coordinator can report its own deadline as a failure ("context deadline
## exceeded", no failing input; golang/go#75804, fixed in Go 1.27), which
## CI saw on a loaded machine.
FUZZ_SMOKE ?= 500x
fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SMOKE)

INTEROP := interop/node-opcua

## interop-deps: node-opcua for the interop tests, at the versions of the
## lock file (npm ci), when Node.js is here and the install is older than
## the lock file.
interop-deps:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "*** Node.js/npm not found: the interop tests against node-opcua will be SKIPPED (they fail under CI)"; \
	elif [ ! -f $(INTEROP)/node_modules/.package-lock.json ] || \
	     [ $(INTEROP)/package-lock.json -nt $(INTEROP)/node_modules/.package-lock.json ]; then \
	  echo "installing node-opcua for the interop tests"; \
	  cd $(INTEROP) && npm ci --no-audit --no-fund --loglevel=error; \
	fi

vet:
	$(GO) vet ./...

## demo: run the scripted maintenance demo on the embedded cluster.
demo:
	$(GO) run ./cmd/apbridge-lab demo

## bench: run every apbridge bench scenario and the Go benchmarks.
bench:
	$(GO) run ./cmd/apbridge-lab bench $(BENCH_ARGS)
	$(GO) test -run '^$$' -bench . -benchmem ./...

## soak: the long soak (docs/reliability.md): SOAK_CYCLES cycles of every
## fault kind under traffic, on the core sink, then on the JetStream sink,
## then with a fleet of three relays (soak-fleet). A failure prints the
## seed and the cycle to replay (SOAK_ARGS=--seed N).
SOAK_CYCLES ?= 100
SOAK_ARGS   ?=
soak:
	$(GO) run ./cmd/apbridge-lab bench --json --grace 1s --cycles $(SOAK_CYCLES) --sink core $(SOAK_ARGS) soak
	$(GO) run ./cmd/apbridge-lab bench --json --grace 1s --cycles $(SOAK_CYCLES) --sink jetstream $(SOAK_ARGS) soak
	$(MAKE) --no-print-directory soak-fleet

## soak-fleet: the soak with three relays of one fleet and a relay kill
## among the faults (JetStream sink; docs/reliability.md#the-fleet).
soak-fleet:
	$(GO) run ./cmd/apbridge-lab bench --json --grace 1s --cycles $(SOAK_CYCLES) --sink jetstream --fleet $(SOAK_ARGS) soak

## lint: gofmt, vet and staticcheck.
lint: vet
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

## proto: regenerate mxgateway/mxpb from proto/ with buf and the Go
## plugins at pinned versions (Go is all it needs; no system protoc).
BUF ?= github.com/bufbuild/buf/cmd/buf@v1.75.0
proto:
	cd proto && $(GO) run $(BUF) generate

fmt:
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')

## build: the relay (apbridge) and the lab (apbridge-lab: demo, bench) in
## ./bin (not committed).
build:
	$(GO) build -o bin/apbridge ./cmd/apbridge
	$(GO) build -o bin/apbridge-lab ./cmd/apbridge-lab

## release: the relay for each of RELEASE_PLATFORMS, static
## (CGO_ENABLED=0), stamped with its version, commit and build date
## (apbridge version prints them), with their SHA-256 sums in
## dist/SHA256SUMS (dist/ is not committed). VERSION is the tag (git
## describe, without the "v"), or the source's version with the commit as
## build metadata when no tag is reachable; BUILD_DATE honours
## SOURCE_DATE_EPOCH for a reproducible build.
DIST              ?= dist
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 windows/amd64
GIT_COMMIT   = $(shell git rev-parse HEAD 2>/dev/null)
GIT_MODIFIED = $(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),true)
BASE_VERSION = $(shell sed -n 's/^const Version = "\(.*\)"/\1/p' bridge/service.go)
VERSION     ?= $(or $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//'),$(BASE_VERSION)-dev+g$(shell git rev-parse --short=12 HEAD 2>/dev/null))
BUILD_DATE  ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS      = -s -w -X main.version=$(VERSION) -X main.commit=$(GIT_COMMIT) -X main.buildDate=$(BUILD_DATE) -X main.modified=$(GIT_MODIFIED)
release:
	rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
	  out=$(DIST)/apbridge-$(VERSION)-$$os-$$arch$$ext; echo "build $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $$out ./cmd/apbridge; \
	done
	cd $(DIST) && sha256sum apbridge-* > SHA256SUMS && cat SHA256SUMS

## image: the container image (Dockerfile) as IMAGE, stamped as release
## stamps, when a container engine (docker, podman) answers; skipped with
## a message otherwise. CI needs none.
ENGINE ?= $(shell command -v docker || command -v podman)
IMAGE  ?= apbridge:$(subst +,_,$(VERSION))
image:
	@if [ -z "$(ENGINE)" ] || ! $(ENGINE) info >/dev/null 2>&1; then \
	  echo "*** no container engine answers (docker or podman): image SKIPPED"; exit 0; fi; \
	$(ENGINE) build --build-arg VERSION='$(VERSION)' --build-arg COMMIT='$(GIT_COMMIT)' \
	  --build-arg BUILD_DATE='$(BUILD_DATE)' --build-arg MODIFIED='$(GIT_MODIFIED)' -t '$(IMAGE)' .

clean:
	rm -rf bin $(DIST) $(INTEROP)/node_modules
