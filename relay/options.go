package relay

import (
	"errors"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Option configures a Relay beyond its Config: what a library user or a
// test harness builds in code rather than in a file. An option that cannot
// apply returns an error, which Start returns.
type Option func(*options) error

type options struct {
	log      zerolog.Logger
	natsOpts []nats.Option
	connOpts []apconn.Option
	sources  []extraSource
	// factories are WithSourceFactory's sources (fleet.go).
	factories []extraFactory
	version   string
	metadata  map[string]string
	onSwitch  func(source, cause string, took time.Duration)
	// onProgress is WithStartProgress's f, or nil.
	onProgress func(step string)
}

// progress reports a step of Start.
func (o *options) progress(step string) {
	if o.onProgress != nil {
		o.onProgress(step)
	}
}

// WithStartProgress calls f with each step Start takes as it begins it
// ("connecting to NATS", "setting up JetStream stream S", "joining fleet
// B"), so that a caller can say truthfully what a starting relay waits
// for. Start waits for NATS only: sources connect in the background. f
// must not block.
func WithStartProgress(f func(step string)) Option {
	return func(o *options) error { o.onProgress = f; return nil }
}

type extraSource struct {
	src  bridge.Source
	tags []bridge.TagConfig
}

// WithLogger logs through l: the relay, its connection, sink, bridge and
// sources (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithNATSOptions adds nats.go options to those the config implies
// (credentials, TLS), for every connection of the ApConnection.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) error { o.natsOpts = append(o.natsOpts, opts...); return nil }
}

// WithConnOptions adds ApConnection options after those the config
// implies (name, lame-duck handling, fast cutover), so they win: an event
// handler, liveness timing.
func WithConnOptions(opts ...apconn.Option) Option {
	return func(o *options) error { o.connOpts = append(o.connOpts, opts...); return nil }
}

// WithSource adds a source built by the caller, with its tags, after the
// config's own sources: a source of a kind the config cannot describe, or
// one wrapped by the caller. A config with such a source needs no sources
// of its own.
func WithSource(src bridge.Source, tags []bridge.TagConfig) Option {
	return func(o *options) error {
		if src == nil {
			return errors.New("WithSource: nil source")
		}
		o.sources = append(o.sources, extraSource{src, tags})
		return nil
	}
}

// WithVersion sets the version the relay's micro service reports, a
// semantic version such as "1.2.3" (default bridge.Version): the binary's
// own, from its build.
func WithVersion(v string) Option {
	return func(o *options) error { o.version = v; return nil }
}

// WithServiceMetadata adds md to the metadata of the relay's micro
// service (bridge.Config.Metadata): the binary's revision and build date,
// so that `nats micro info` names the build a relay runs.
func WithServiceMetadata(md map[string]string) Option {
	return func(o *options) error { o.metadata = md; return nil }
}

// WithSourceSwitchObserver calls f after each failover of a source with
// its name, cause and duration (see bridge.WithSourceSwitchObserver).
func WithSourceSwitchObserver(f func(source, cause string, took time.Duration)) Option {
	return func(o *options) error { o.onSwitch = f; return nil }
}
