package relay

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/bridge/mxsource"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/internal/tlsconf"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Relay is a running relay: an ApConnection, a sink, a bridge and its
// sources, built from a Config by Start. Stop it with Shutdown (or Close).
type Relay struct {
	log  zerolog.Logger
	conn *apconn.Conn
	js   *jetstreamsink.Sink // nil with the core sink
	b    *bridge.Bridge
	fl   *fleetPart // nil unless the relay is one of a fleet
	// state keeps the sources' handoffs in stateDir; nil without one.
	state *stateStore
	// edge watches the site stream and the hub's sourcing of it; nil
	// without an edge section.
	edge *edge.Monitor
	// browseJobs are the sources whose browse roots the browser expands
	// once the bridge runs.
	browseJobs []browseJob
	browser    *browser

	// built are the OPC UA sources built from the config, by name, for
	// a live change of their monitoring (apply.go).
	builtMu sync.Mutex
	built   map[string]*opcuasource.Source
	// live is the running config and its version, changed by Apply.
	live liveConfig

	stopOnce sync.Once
	stopErr  error
}

// connectTimeout bounds the first connection to the brokers.
const connectTimeout = 30 * time.Second

// Start validates c, connects to NATS, builds the sink, the bridge and the
// sources, joins the fleet (in a fleet), starts the bridge and returns the
// running relay. It never waits for a source's servers: the sources connect in the
// background, and browse roots are expanded once the bridge runs, retried
// until a server answers (Ready says what each waits for). ctx bounds the
// start only. On an error everything started so far is closed again.
func Start(ctx context.Context, c *Config, opts ...Option) (*Relay, error) {
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
	}
	if err := c.validate(len(o.sources)+len(o.factories) > 0); err != nil {
		return nil, err
	}
	if c.Fleet != nil && len(o.sources) > 0 {
		return nil, errors.New("relay: a fleet relay builds a source again each time it wins its lease: give extra sources with WithSourceFactory, not WithSource")
	}
	natsOpts, err := c.natsOptions()
	if err != nil {
		return nil, err
	}
	o.progress("connecting to NATS")
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	apOpts := []apconn.Option{
		apconn.WithName(c.connName()),
		apconn.WithLameDuckHandling(c.handling()),
		apconn.WithNATSOptions(append(natsOpts, o.natsOpts...)...),
		apconn.WithLogger(o.log),
	}
	if c.NATS.FastCutover {
		apOpts = append(apOpts, apconn.WithFastCutover())
	}
	if c.NATS.FailOnAuthError {
		apOpts = append(apOpts, apconn.WithFailOnAuthError())
	}
	conn, err := apconn.Connect(cctx, c.NATS.Servers, append(apOpts, o.connOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	r := &Relay{log: o.log, conn: conn, built: map[string]*opcuasource.Source{},
		live: liveConfig{cfg: c, version: 1, extras: len(o.sources) + len(o.factories)}}
	if c.StateDir != "" && c.Fleet == nil {
		// A fleet keeps a source's handoff with its lease (fleet.handoff).
		r.state = newStateStore(c.StateDir, o.log)
	}
	bopts := []bridge.Option{bridge.WithLogger(o.log)}
	prefix := c.Service.Prefix
	if prefix == "" {
		prefix = wire.DefaultPrefix
	}
	bopts = append(bopts, bridge.WithEndpoints(r.configEndpoints(prefix, c.Service.TrustRequestInfo)...))
	if o.onSwitch != nil {
		bopts = append(bopts, bridge.WithSourceSwitchObserver(o.onSwitch))
	}
	if c.Sink == SinkJetStream {
		// The stream is set up here when its subjects are configured,
		// and when the bridge starts otherwise.
		o.progress("setting up JetStream stream " + c.JetStream.Stream)
		jsOpts := []jetstreamsink.Option{jetstreamsink.WithLogger(o.log)}
		if c.Fleet != nil && !c.NoHeaders {
			// While a pair changes hands both relays publish it; the lease
			// token keeps the old owner's late updates out of the stream.
			jsOpts = append(jsOpts, jetstreamsink.WithFence(wire.HeaderLease))
		}
		if r.js, err = jetstreamsink.New(ctx, conn, c.JetStream, jsOpts...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		bopts = append(bopts, bridge.WithSink(r.js))
	}
	if c.Fleet != nil {
		r.fl = newFleetPart(c.Fleet, o.log)
		var inner bridge.Sink = bridge.NewCoreSink(conn)
		if r.js != nil {
			inner = r.js
		}
		bopts = append(bopts, bridge.WithSink(newFencedSink(inner, r.fl, c.NoHeaders)))
	}
	r.b, err = bridge.New(conn, bridge.Config{
		Instance:         c.Instance,
		Prefix:           c.Service.Prefix,
		ServiceName:      c.Service.Name,
		TrustRequestInfo: c.Service.TrustRequestInfo,
		Version:          o.version,
		Metadata:         o.metadata,
		Subject:          c.Subject,
		NoHeaders:        c.NoHeaders,
		Guard:            c.guard(),
	}, bopts...)
	if err != nil {
		r.closeSink()
		conn.Close()
		return nil, err
	}
	fail := func(err error) (*Relay, error) {
		r.b.Close()
		r.closeSink()
		if r.fl != nil {
			r.fl.closeConn()
		}
		conn.Close()
		return nil, err
	}
	if r.fl != nil {
		// The fleet's config version, when one was written, is what the
		// sources are built from (fleet_version.go).
		if err := r.fl.connect(c.NATS.Servers, c.connName()+"-fleet", append(natsOpts, o.natsOpts...)); err != nil {
			return fail(err)
		}
		if c, err = r.startVersion(ctx, c); err != nil {
			return fail(err)
		}
	}
	for i, sc := range c.Sources {
		if err := r.addSource(i, sc); err != nil {
			return fail(err)
		}
	}
	for _, es := range o.sources {
		if err := r.b.AddSource(es.src, es.tags); err != nil {
			return fail(err)
		}
	}
	for _, ef := range o.factories {
		if err := r.add(ef.name, ef.tags, nil, ef.f); err != nil {
			return fail(err)
		}
	}
	if r.fl != nil {
		// Before the bridge starts: a relayId another live relay holds
		// is refused before this relay serves or publishes anything. A
		// lease won now is held for the bridge's start (leasedSource).
		o.progress("joining fleet " + c.Fleet.Bucket)
		if err := r.fl.join(ctx); err != nil {
			return fail(err)
		}
	}
	if err := r.b.Start(ctx); err != nil {
		if r.fl != nil {
			lctx, cancel := context.WithTimeout(context.Background(), fleetLeaveTimeout)
			r.fl.leave(lctx)
			cancel()
		}
		return fail(err)
	}
	if c.Edge != nil {
		// After the bridge started: the site stream is set up by now.
		r.edge = edge.Start(conn.Active, *c.Edge, c.edgeSite(), edge.WithLogger(o.log))
	}
	r.browser = newBrowser(o.log)
	r.browser.start(r.b, r.browseJobs)
	if r.fl != nil {
		r.fl.versions.follow(r)
	}
	o.log.Info().Int("sources", len(c.Sources)+len(o.sources)).Str("nats", conn.Status().String()).Msg("relay running")
	return r, nil
}

// Conn returns the relay's ApConnection.
func (r *Relay) Conn() *apconn.Conn { return r.conn }

// Edge returns the monitor of the edge site, or nil without an edge
// section.
func (r *Relay) Edge() *edge.Monitor { return r.edge }

// Bridge returns the relay's bridge: its status, stats and subjects.
func (r *Relay) Bridge() *bridge.Bridge { return r.b }

// JetStream returns the JetStream sink, or nil when the relay publishes on
// core NATS.
func (r *Relay) JetStream() *jetstreamsink.Sink { return r.js }

// add adds a source built by f: directly, or leased in a fleet relay.
func (r *Relay) add(name string, tags []bridge.TagConfig, opts []bridge.SourceOption, f SourceFactory) error {
	src, err := f()
	if err != nil {
		return err
	}
	if r.fl != nil {
		return r.b.AddSource(r.fl.lease(name, src, f), tags, opts...)
	}
	return r.b.AddSource(src, tags, opts...)
}

func (r *Relay) addSource(i int, sc SourceConfig) error {
	f, tags, err := r.sourceFactory(i, sc)
	if err != nil {
		return err
	}
	var addOpts []bridge.SourceOption
	if len(sc.Browse) > 0 {
		// Browsed once the bridge runs: its servers may be down now.
		r.browseJobs = append(r.browseJobs, browseJob{sc: sc, listed: slices.Clone(tags)})
		addOpts = append(addOpts, bridge.WithTagsLater())
	}
	return r.add(sc.Name, tags, addOpts, f)
}

// sourceFactory returns what builds config source i, sc, and its listed
// tags. Each source it builds is kept as the relay's instance of sc
// (r.built), so that a live change can reach it (SetMonitoring).
func (r *Relay) sourceFactory(i int, sc SourceConfig) (SourceFactory, []bridge.TagConfig, error) {
	if sc.Type == TypeMxGateway {
		return func() (bridge.Source, error) {
			mopts := []mxsource.Option{mxsource.WithLogger(r.log)}
			if r.state != nil {
				// The mx source keeps its handoff itself, in a file of
				// its own beside the OPC UA sources' (mxsource.WithStateFile).
				mopts = append(mopts, mxsource.WithStateFile(filepath.Join(r.state.dir, sc.Name+".mx-state.json")))
			}
			if r.fl != nil {
				// In a fleet the handoff is kept with the lease
				// (fleet.handoff), in the fleet's handoff bucket.
				mopts = r.fl.mxHandoffOptions(sc.Name, mopts)
			}
			src, err := mxsource.New(sc.Name, sc.MxGateway.Config, mopts...)
			if err != nil {
				return nil, fmt.Errorf("sources[%d]: %w", i, err)
			}
			return src, nil
		}, sc.MxGateway.Tags, nil
	}
	secOpts, err := sc.Security.PairOptions(r.log.With().Str("source", sc.Name).Logger())
	if err != nil {
		return nil, nil, fmt.Errorf("sources[%d].security: %w", i, err)
	}
	tags, monitoring := sc.tagsAndMonitoring()
	var fc *FleetConfig
	if r.fl != nil {
		fc = r.fl.cfg
	}
	pc := pairConfig(fc, sc)
	return func() (bridge.Source, error) {
		pairOpts := secOpts
		if r.state != nil {
			// The source records what a successor needs, leaves its
			// data subscription on the server at a graceful stop, and
			// takes over what its predecessor left.
			pairOpts = append(slices.Clip(secOpts), uaclient.WithHandoffRecorder(r.state.recorder(sc.Name)),
				uaclient.WithHandoffSync(r.state.syncer(sc.Name)), uaclient.WithKeepSubscriptionAtClose())
			if h, ok := r.state.takeover(sc.Name); ok {
				pairOpts = append(pairOpts, uaclient.WithTakeover(h))
			}
		}
		if r.fl != nil {
			pairOpts = r.fl.handoffOptions(sc.Name, pairOpts)
		}
		src, err := opcuasource.New(sc.Name, pc, opcuasource.WithLogger(r.log), opcuasource.WithPairOptions(pairOpts...),
			opcuasource.WithMonitoring(monitoring))
		if err != nil {
			return nil, err
		}
		r.builtMu.Lock()
		r.built[sc.Name] = src
		r.builtMu.Unlock()
		return src, nil
	}, tags, nil
}

// tagsAndMonitoring returns an OPC UA source's listed tags and their
// monitoring overrides by name, its groups' applied.
func (sc SourceConfig) tagsAndMonitoring() ([]bridge.TagConfig, map[string]opcuasource.Monitoring) {
	listed := sc.listedTags("")
	tags := make([]bridge.TagConfig, 0, len(listed))
	monitoring := map[string]opcuasource.Monitoring{}
	for _, e := range listed {
		tags = append(tags, e.tag.TagConfig)
		if !e.mon.IsZero() {
			monitoring[e.tag.Name] = e.mon
		}
	}
	return tags, monitoring
}

// connName is the name the relay's connections give the brokers.
func (c *Config) connName() string {
	switch {
	case c.NATS.Name != "":
		return c.NATS.Name
	case c.Instance != "":
		return "apbridge-" + c.Instance
	}
	return "apbridge"
}

// natsOptions are the nats.go options the config implies: authentication
// and TLS.
func (c *Config) natsOptions() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.NATS.Credentials != "":
		opts = append(opts, nats.UserCredentials(c.NATS.Credentials))
	case c.NATS.User != "":
		opts = append(opts, nats.UserInfo(c.NATS.User, c.NATS.Password))
	case c.NATS.Token != "":
		opts = append(opts, nats.Token(c.NATS.Token))
	}
	if t := c.NATS.TLS; t != nil {
		tc, err := tlsconf.Client("nats.tls", t.CA, t.Cert, t.Key, "")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// Shutdown drains: the sources stop first (nothing more comes in), then
// everything already received is confirmed by NATS (or stored, with the
// JetStream sink) until ctx ends, then the connection closes. It is
// idempotent: later calls return the first call's result.
func (r *Relay) Shutdown(ctx context.Context) error {
	r.stopOnce.Do(func() {
		var errs []error
		if r.browser != nil {
			r.browser.close()
		}
		if r.edge != nil {
			r.edge.Close()
		}
		if r.fl != nil {
			// The fleet hears first: every source is handed over (its
			// instance stops) before the bridge drains what it has.
			lctx, cancel := context.WithTimeout(ctx, fleetLeaveTimeout)
			if err := r.fl.leave(lctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		if err := r.b.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		if r.state != nil {
			r.state.close() // the sources are closed: their last state is final
		}
		r.closeSink()
		if err := r.conn.Drain(ctx); err != nil && !errors.Is(err, apconn.ErrClosed) {
			errs = append(errs, err)
		}
		r.log.Info().Msg("relay stopped")
		r.stopErr = errors.Join(errs...)
	})
	return r.stopErr
}

// Close is Shutdown with at most DefaultDrainTimeout for the drain.
func (r *Relay) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultDrainTimeout)
	defer cancel()
	return r.Shutdown(ctx)
}

// DefaultDrainTimeout is how long Close, and `apbridge run` on SIGTERM,
// wait for what was received to be confirmed.
const DefaultDrainTimeout = 20 * time.Second

func (r *Relay) closeSink() {
	if r.js != nil {
		r.js.Close()
	}
}

// Ready reports whether the relay does its job, and if not, why: an active
// NATS connection, every source connected to a server (a degraded one
// counts, and in a fleet so does one another relay owns), every source's
// browse roots expanded and, with the JetStream sink, a stream that
// stores.
func (r *Relay) Ready() (bool, []string) {
	var reasons []string
	if r.js != nil {
		if ok, why := r.js.Ready(); !ok {
			for _, w := range why {
				reasons = append(reasons, "jetstream: "+w)
			}
		}
	}
	switch r.conn.Status() {
	case apconn.StatusConnected, apconn.StatusDegraded:
	default:
		reasons = append(reasons, "nats: "+r.conn.Status().String())
	}
	if m := r.Fleet(); m != nil && m.Err() != nil {
		reasons = append(reasons, "fleet: "+m.Err().Error())
	}
	_, waiting := r.b.Ready()
	reasons = append(reasons, waiting...)
	if r.browser != nil {
		reasons = append(reasons, r.browser.waiting()...)
	}
	return len(reasons) == 0, reasons
}
