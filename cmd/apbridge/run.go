package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/bridge"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// runValidate checks a config without connecting to anything.
func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := loadConfigFlag(*path, stderr)
	if err != nil {
		return err
	}
	tags := 0
	for _, s := range c.Sources {
		tags += len(s.Tags)
	}
	fmt.Fprintf(stdout, "%s: valid (%d sources, %d tags listed, %d browse roots)\n", *path, len(c.Sources), tags, countBrowse(c))
	return nil
}

// loadConfigFlag loads the file named by --config and prints every
// problem on its own line: an operator fixes them all in one go.
func loadConfigFlag(path string, stderr io.Writer) (*Config, error) {
	if path == "" {
		return nil, errors.New("--config is required")
	}
	c, err := LoadConfig(path)
	if err != nil {
		for _, e := range splitJoined(err) {
			fmt.Fprintln(stderr, e)
		}
		return nil, exitError{code: 1}
	}
	return c, nil
}

func countBrowse(c *Config) int {
	n := 0
	for _, s := range c.Sources {
		n += len(s.Browse)
	}
	return n
}

// runRun is `apbridge run --config FILE`: the relay.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the config file (YAML)")
	pretty := fs.Bool("pretty", false, "console log output instead of JSON")
	drain := fs.Duration("drain-timeout", 20*time.Second, "how long SIGTERM waits for what was received to be confirmed by NATS")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := loadConfigFlag(*path, stderr)
	if err != nil {
		return err
	}
	level, _ := zerolog.ParseLevel(c.LogLevel)
	if c.LogLevel == "" {
		level = zerolog.InfoLevel
	}
	log := newLogger(stderr, *pretty, level).With().Str("instance", c.Instance).Logger()
	r, err := startRelay(ctx, c, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info().Msg("stopping: draining what was received")
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return r.stop(sctx)
}

// relay is a running apbridge: the connection, the bridge and the HTTP
// listener.
type relay struct {
	log     zerolog.Logger
	conn    *apconn.Conn
	b       *bridge.Bridge
	js      *bridge.JetStreamSink // nil with the core sink
	http    *http.Server
	httpLn  net.Listener
	httpErr chan error
}

func startRelay(ctx context.Context, c *Config, log zerolog.Logger) (*relay, error) {
	natsOpts, err := natsOptions(c)
	if err != nil {
		return nil, err
	}
	name := c.NATS.Name
	if name == "" {
		name = "apbridge"
		if c.Instance != "" {
			name = "apbridge-" + c.Instance
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	apOpts := []apconn.Option{
		apconn.WithName(name),
		apconn.WithLameDuckHandling(c.handling()),
		apconn.WithNATSOptions(natsOpts...),
		apconn.WithLogger(log),
	}
	if c.NATS.FastCutover {
		apOpts = append(apOpts, apconn.WithFastCutover())
	}
	conn, err := apconn.Connect(cctx, c.NATS.Servers, apOpts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	r := &relay{log: log, conn: conn}
	bopts := []bridge.Option{bridge.WithLogger(log)}
	if c.Sink == bridge.SinkJetStream {
		js, err := bridge.NewJetStreamSink(ctx, conn, c.JetStream, bridge.WithJetStreamLogger(log))
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		r.js = js
		bopts = append(bopts, bridge.WithSink(js))
	}
	b, err := bridge.New(conn, bridge.Config{
		Instance:  c.Instance,
		Prefix:    c.Service.Prefix,
		Subject:   c.Subject,
		NoHeaders: c.NoHeaders,
		Guard:     c.guard(),
	}, bopts...)
	if err != nil {
		r.closeSink()
		conn.Close()
		return nil, err
	}
	r.b = b
	fail := func(err error) (*relay, error) {
		b.Close()
		r.closeSink()
		conn.Close()
		return nil, err
	}
	for i, sc := range c.Sources {
		if err := r.addSource(ctx, i, sc); err != nil {
			return fail(err)
		}
	}
	if err := b.Start(ctx); err != nil {
		return fail(err)
	}
	if addr := c.httpListen(); addr != "" {
		if err := r.serveHTTP(addr); err != nil {
			return fail(err)
		}
	}
	log.Info().Int("sources", len(c.Sources)).Str("nats", conn.Status().String()).Msg("relay running")
	return r, nil
}

func (r *relay) addSource(ctx context.Context, i int, sc SourceConfig) error {
	secOpts, err := sc.Security.PairOptions()
	if err != nil {
		return fmt.Errorf("sources[%d].security: %w", i, err)
	}
	tags := append([]bridge.TagConfig(nil), sc.Tags...)
	if len(sc.Browse) > 0 {
		found, err := r.browse(ctx, sc)
		if err != nil {
			return fmt.Errorf("sources[%d].browse: %w", i, err)
		}
		listed := map[string]bool{}
		for _, t := range tags {
			listed[t.Name] = true
		}
		for _, t := range found {
			if !listed[t.Name] {
				tags = append(tags, t)
			}
		}
		r.log.Info().Str("source", sc.Name).Int("browsed", len(found)).Msg("browse roots expanded")
	}
	src, err := bridge.NewOPCUASource(sc.Name, sc.PairConfig, r.log, secOpts...)
	if err != nil {
		return err
	}
	return r.b.AddSource(src, tags)
}

// browse expands the browse roots on the first endpoint that answers.
func (r *relay) browse(ctx context.Context, sc SourceConfig) ([]bridge.TagConfig, error) {
	var errs []error
	for i, ep := range sc.Endpoints {
		opts, err := sc.Security.ClientOptions(i)
		if err != nil {
			return nil, err
		}
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tags, err := bridge.BrowseTags(bctx, ep, sc.Browse, opts...)
		cancel()
		if err == nil {
			return tags, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func natsOptions(c *Config) ([]nats.Option, error) {
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
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.CA != "" {
			pem, err := os.ReadFile(t.CA)
			if err != nil {
				return nil, fmt.Errorf("nats.tls.ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("nats.tls.ca: %s holds no PEM certificate", t.CA)
			}
			tc.RootCAs = pool
		}
		if t.Cert != "" {
			cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
			if err != nil {
				return nil, fmt.Errorf("nats.tls: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// stop drains: the sources stop first, then everything already received is
// confirmed by NATS, then the connection closes.
func (r *relay) stop(ctx context.Context) error {
	var errs []error
	if err := r.b.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	r.closeSink()
	if err := r.conn.Drain(ctx); err != nil && !errors.Is(err, apconn.ErrClosed) {
		errs = append(errs, err)
	}
	if r.http != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r.http.Shutdown(hctx)
		cancel()
		<-r.httpErr
	}
	r.log.Info().Msg("stopped")
	return errors.Join(errs...)
}

func (r *relay) serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics{r: r})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reasons := r.ready()
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{"ready": ready, "reasons": reasons})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	r.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.httpLn = ln
	r.httpErr = make(chan error, 1)
	go func() { r.httpErr <- r.http.Serve(ln) }()
	r.log.Info().Str("listen", ln.Addr().String()).Msg("health and metrics on http")
	return nil
}

func (r *relay) closeSink() {
	if r.js != nil {
		r.js.Close()
	}
}

// ready reports whether the relay does its job: an active NATS connection,
// every source connected to a server (a degraded one counts) and, with the
// JetStream sink, a stream that stores.
func (r *relay) ready() (bool, []string) {
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
	for _, s := range r.b.Stats() {
		switch s.Health.State {
		case bridge.StateConnected, bridge.StateDegraded:
		default:
			reasons = append(reasons, fmt.Sprintf("source %s: %s", s.Name, s.Health.State))
		}
	}
	return len(reasons) == 0, reasons
}
