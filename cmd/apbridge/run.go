package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/winservice"
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
	// Warnings do not fail the check: the config runs, and loses data
	// only when a relay dies (docs/reliability.md).
	for _, w := range c.Warnings() {
		fmt.Fprintln(stdout, "WARNING:", w)
	}
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

// runRun is `apbridge run --config FILE`: the relay, in the foreground,
// under systemd or as a Windows service (serve.go).
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// From here on SIGHUP asks for a reload: it must never end the relay
	// (its default action would, with exit status 129 and no log line).
	reloads := make(chan string, 1)
	stopHUP := forwardSIGHUP(reloads)
	defer stopHUP()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "the config file (YAML)")
	pretty := fs.Bool("pretty", false, "console log output instead of JSON")
	drain := fs.Duration("drain-timeout", relay.DefaultDrainTimeout, "how long SIGTERM waits for what was received to be confirmed by NATS")
	logFile := fs.String("log-file", "", "append the log to this file instead of stderr")
	eventLog := fs.String("event-log", "", "Windows: log to the Event Log under this source name instead of stderr (a service does by default, as "+winservice.DefaultName+")")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *drain <= 0 {
		return cli.Usagef("--drain-timeout: %v is out of range (valid: more than 0, e.g. 30s)", *drain)
	}
	if *path == "" {
		return cli.Usagef("--config is required")
	}
	asService, err := winservice.IsService()
	if err != nil {
		return fmt.Errorf("windows service: %w", err)
	}
	sink, err := openLogSink(*logFile, *eventLog, asService, stderr, openEventLog)
	if err != nil {
		return err
	}
	defer sink.Close()
	c, err := relay.Load(*path)
	if err != nil {
		errs := relay.Errors(err)
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = e.Error()
			fmt.Fprintln(stderr, e)
		}
		if sink.separate() {
			l := cli.NewLogger(sink.w, false, zerolog.InfoLevel)
			l.Error().Str("config", *path).Strs("errors", lines).Msg("config refused")
		}
		return cli.ExitError{Code: 1}
	}
	level, _ := zerolog.ParseLevel(c.LogLevel)
	if c.LogLevel == "" {
		level = zerolog.InfoLevel
	}
	log := cli.NewLogger(sink.w, *pretty, level).With().Str("instance", c.Instance).Logger()
	log.Info().Str("version", readBuildInfo().String()).Msg("starting")
	for _, w := range c.Warnings() {
		log.Warn().Str("config", *path).Msg(w)
	}
	lc := lifecycle{notify: newNotifier(log), reloads: reloads}
	if !asService {
		return serve(ctx, c, *path, log, *drain, lc)
	}
	return winservice.Run(ctx, winservice.DefaultName, winservice.Relay{
		Run: func(ctx context.Context, ready func()) error {
			lc.onReady = ready
			return serve(ctx, c, *path, log, *drain, lc)
		},
		Reload: func() { requestReload(reloads, "service parameter change") },
	}, winservice.Timing{Start: 2 * time.Minute, Stop: *drain + 10*time.Second, CheckPoint: 2 * time.Second})
}

// forwardSIGHUP turns each SIGHUP into a reload request on reloads until
// the returned stop is called; stop waits for its goroutine.
func forwardSIGHUP(reloads chan<- string) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-sig:
				requestReload(reloads, "SIGHUP")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
		wg.Wait()
	}
}

// requestReload queues a reload request unless one is queued already:
// requests that come while one waits are served by it.
func requestReload(reloads chan<- string, trigger string) {
	select {
	case reloads <- trigger:
	default:
	}
}

// running is a relay with its health and metrics listener. The listener
// starts first, so that /healthz answers while the relay still connects
// and /readyz says what it waits for.
type running struct {
	relay atomic.Pointer[relay.Relay] // nil until relay.Start returns
	// step is what relay.Start is doing, for /readyz until it returns.
	step atomic.Pointer[string]
	// onStep is told each step too (systemd's STATUS=), or nil.
	onStep func(string)
	// lastPass is when the main loop last passed (Unix ns), 0 before it
	// runs and while the relay drains; stale is how old a pass may be
	// before /healthz calls the relay stalled (serve.go).
	lastPass, stale atomic.Int64
	log             zerolog.Logger
	hist            histograms
	stopEv          func() // ends the NATS event subscription of hist
	http            *http.Server
	httpLn          net.Listener
	httpErr         chan error
}

// startRelay starts, unless the config turns it off, the HTTP listener,
// then the relay of c. onStep, if not nil, is told each step of the start.
func startRelay(ctx context.Context, c *relay.Config, log zerolog.Logger, onStep func(string)) (*running, error) {
	r := &running{log: log, hist: newHistograms(), onStep: onStep}
	r.setStep("validating the config")
	if addr := c.HTTPListen(); addr != "" {
		if err := r.serveHTTP(addr); err != nil {
			return nil, err
		}
	}
	build := readBuildInfo()
	rl, err := relay.Start(ctx, c, relay.WithLogger(log), relay.WithVersion(build.Version), relay.WithServiceMetadata(build.metadata()),
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

func (r *running) setStep(step string) {
	r.step.Store(&step)
	if r.onStep != nil {
		r.onStep(step)
	}
}

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
		if ago := r.stalled(); ago > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "stalled: the main loop last passed %v ago\n", ago.Round(time.Millisecond))
			return
		}
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
