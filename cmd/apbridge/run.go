package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/relay"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// runValidate checks a config without connecting to anything.
func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "", "the config file (YAML)")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	c, err := loadConfigFlag(*path, stderr)
	if err != nil {
		return err
	}
	tags := 0
	for _, s := range c.Sources {
		tags += len(s.Tags) + len(s.MxGateway.Tags)
		for _, g := range s.Groups {
			tags += len(g.Tags)
		}
	}
	fmt.Fprintf(stdout, "%s: valid (%d sources, %d tags listed, %d browse roots)\n", *path, len(c.Sources), tags, countBrowse(c))
	return nil
}

// loadConfigFlag loads the file named by --config and prints every
// problem on its own line: an operator fixes them all in one go.
func loadConfigFlag(path string, stderr io.Writer) (*relay.Config, error) {
	if path == "" {
		return nil, cli.Usagef("--config is required")
	}
	c, err := relay.Load(path)
	if err != nil {
		for _, e := range relay.Errors(err) {
			fmt.Fprintln(stderr, e)
		}
		return nil, cli.ExitError{Code: 1}
	}
	return c, nil
}

func countBrowse(c *relay.Config) int {
	n := 0
	for _, s := range c.Sources {
		n += len(s.Browse)
	}
	return n
}

// runRun is `apbridge run --config FILE`: the relay.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "the config file (YAML)")
	pretty := fs.Bool("pretty", false, "console log output instead of JSON")
	drain := fs.Duration("drain-timeout", relay.DefaultDrainTimeout, "how long SIGTERM waits for what was received to be confirmed by NATS")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *drain <= 0 {
		return cli.Usagef("--drain-timeout: %v is out of range (valid: more than 0, e.g. 30s)", *drain)
	}
	c, err := loadConfigFlag(*path, stderr)
	if err != nil {
		return err
	}
	hup, stopHUP := notifyReload()
	defer stopHUP()
	level, _ := zerolog.ParseLevel(c.LogLevel)
	if c.LogLevel == "" {
		level = zerolog.InfoLevel
	}
	log := cli.NewLogger(stderr, *pretty, level).With().Str("instance", c.Instance).Logger()
	log.Info().Str("version", readBuildInfo().String()).Msg("starting")
	r, err := startRelay(ctx, c, log)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM or SIGINT before the relay ran: a normal stop.
			// Start closed what it had opened; nothing was received.
			log.Info().Err(err).Msg("stopped while starting")
			return nil
		}
		return err
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			r.reload(ctx, *path)
		}
	}
	log.Info().Msg("stopping: draining what was received")
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return r.stop(sctx)
}

// running is a relay with its health and metrics listener. The listener
// starts first, so that /healthz answers while the relay still connects
// and /readyz says what it waits for.
type running struct {
	relay atomic.Pointer[relay.Relay] // nil until relay.Start returns
	// step is what relay.Start is doing, for /readyz until it returns.
	step    atomic.Pointer[string]
	log     zerolog.Logger
	hist    histograms
	stopEv  func() // ends the NATS event subscription of hist
	http    *http.Server
	httpLn  net.Listener
	httpErr chan error
}

// startRelay starts, unless the config turns it off, the HTTP listener,
// then the relay of c.
func startRelay(ctx context.Context, c *relay.Config, log zerolog.Logger) (*running, error) {
	r := &running{log: log, hist: newHistograms()}
	r.setStep("validating the config")
	if addr := c.HTTPListen(); addr != "" {
		if err := r.serveHTTP(addr); err != nil {
			return nil, err
		}
	}
	rl, err := relay.Start(ctx, c, relay.WithLogger(log), relay.WithVersion(readBuildInfo().Version),
		relay.WithStartProgress(r.setStep),
		relay.WithSourceSwitchObserver(func(source, cause string, took time.Duration) {
			r.hist.source.WithLabelValues(source, causeLabel(cause)).Observe(took.Seconds())
		}))
	if err != nil {
		r.stopHTTP()
		return nil, err
	}
	r.stopEv = rl.Conn().OnEvent(func(e apconn.Event) {
		if e.Kind == apconn.EventSwitched {
			r.hist.nats.WithLabelValues(causeLabel(e.Cause.String())).Observe(e.Duration.Seconds())
		}
	})
	r.relay.Store(rl)
	return r, nil
}

// stop drains the relay (relay.Relay.Shutdown), then stops the listener.
func (r *running) stop(ctx context.Context) error {
	var err error
	if rl := r.relay.Load(); rl != nil {
		r.stopEv()
		err = rl.Shutdown(ctx)
	}
	r.stopHTTP()
	return err
}

func (r *running) stopHTTP() {
	if r.http == nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	r.http.Shutdown(hctx)
	cancel()
	<-r.httpErr
}

func (r *running) setStep(step string) { r.step.Store(&step) }

// ready is /readyz's answer: the relay's own while it runs; while it
// starts, the step it is at.
func (r *running) ready() (bool, []string) {
	rl := r.relay.Load()
	if rl == nil {
		return false, []string{"starting: " + *r.step.Load()}
	}
	return rl.Ready()
}

func (r *running) serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
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
	mux.Handle("/metrics", promhttp.HandlerFor(newRegistry(r), promhttp.HandlerOpts{}))
	r.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.httpLn = ln
	r.httpErr = make(chan error, 1)
	go func() { r.httpErr <- r.http.Serve(ln) }()
	r.log.Info().Str("listen", ln.Addr().String()).Msg("health and metrics on http")
	return nil
}
