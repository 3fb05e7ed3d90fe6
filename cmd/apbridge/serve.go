package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/apbridge/apbridge/relay"
	"github.com/rs/zerolog"
)

// lifecycle ties a run of the relay to what started it: a person, a
// container engine, systemd or the Windows service control manager.
type lifecycle struct {
	// notify is systemd's notify protocol; inert without NOTIFY_SOCKET.
	notify *notifier
	// onReady is called once the relay runs (the Windows service
	// reports Running); nil when nothing waits for it.
	onReady func()
	// reloads delivers reload requests, each named by its trigger
	// ("SIGHUP").
	reloads <-chan string
}

// serve runs the relay of c until ctx ends: it starts it, tells the
// service manager it is ready, runs the main loop, then drains for at
// most drain. path is the config file, for the reload hook.
func serve(ctx context.Context, c *relay.Config, path string, log zerolog.Logger, drain time.Duration, lc lifecycle) error {
	r, err := startRelay(ctx, c, log, func(step string) { lc.notify.status("starting: " + step) })
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM or SIGINT before the relay ran: a normal stop.
			// Start closed what it had opened; nothing was received.
			log.Info().Err(err).Msg("stopped while starting")
			return nil
		}
		return err
	}
	every := passInterval(lc.notify.watchdog)
	r.stale.Store(int64(3 * every))
	lc.notify.ready(r.statusLine())
	if lc.onReady != nil {
		lc.onReady()
	}
	t := time.NewTicker(every)
	loop := mainLoop{
		log:     log,
		notify:  lc.notify,
		state:   r.statusLine,
		passed:  r.markPass,
		reload:  reloadHook(path, r, log, every),
		reloads: lc.reloads,
		tick:    t.C,
	}
	loop.run(ctx)
	t.Stop()
	r.lastPass.Store(0) // draining: /healthz stays ok while it takes
	log.Info().Msg("stopping: draining what was received")
	lc.notify.stopping("stopping: draining what was received")
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	return r.stop(sctx)
}

// defaultPass is the main loop's period without a systemd watchdog: how
// fresh STATUS= and /healthz's liveness are.
const defaultPass = 5 * time.Second

// passInterval is the main loop's period: half the watchdog timeout, as
// sd_watchdog_enabled(3) advises, and no longer than defaultPass.
func passInterval(watchdog time.Duration) time.Duration {
	if watchdog > 0 && watchdog/2 < defaultPass {
		return watchdog / 2
	}
	return defaultPass
}

// mainLoop is the relay's main loop, the one goroutine whose progress
// proves the relay alive. Each pass reads the relay's state, then pings
// systemd's watchdog (WATCHDOG=1) and records the pass for /healthz. A
// reload request is handled in the loop too, so a reload that never
// returns stops the pings as a hang would.
//
// What "hung" means here: the relay can no longer read its own state
// within the watchdog timeout. Reading it (relay.Relay.Ready, what
// /readyz and the status endpoint answer) takes the lock of the NATS
// connection, of the bridge and of each of its sources, of the
// JetStream sink and of the fleet membership: the locks the publish path
// and every failover take too. A deadlock or a lock held forever in any
// of them, or a stuck reload, blocks the pass, the pings stop and
// systemd restarts the relay (WatchdogSec=). Not hung: NATS
// reconnecting, a source whose servers are all down, a stream that does
// not store. The relay rides those out by design; a restart would only
// drop its replay buffer and lengthen the outage, so they show in
// STATUS= and /readyz, never in the watchdog.
type mainLoop struct {
	log    zerolog.Logger
	notify *notifier
	// state reads the relay's state as a one-line status; it blocks
	// while the relay is hung.
	state func() string
	// passed records a completed pass (for /healthz).
	passed  func()
	reload  func(ctx context.Context, trigger string) error
	reloads <-chan string
	tick    <-chan time.Time
}

// run passes once at once, then at every tick, until ctx ends.
func (l *mainLoop) run(ctx context.Context) {
	l.pass()
	for {
		select {
		case <-ctx.Done():
			return
		case trigger := <-l.reloads:
			l.log.Info().Str("trigger", trigger).Msg(trigger + " received: reload requested")
			if err := l.reload(ctx, trigger); err != nil {
				l.log.Warn().Err(err).Msg("reload failed: the relay runs on unchanged")
			}
		case <-l.tick:
			l.pass()
		}
	}
}

func (l *mainLoop) pass() {
	line := l.state()
	l.passed()
	l.notify.alive()
	l.notify.status(line)
}

// statusLine is the relay's state in one line, for STATUS=:
// "ready: NATS connected, 2 sources" or "not ready: <the /readyz
// reasons>".
func (r *running) statusLine() string {
	ok, reasons := r.ready()
	rl := r.relay.Load()
	if rl == nil {
		return strings.Join(reasons, "; ")
	}
	if ok {
		return fmt.Sprintf("ready: NATS %s, %d sources", rl.Conn().Status(), len(rl.Bridge().Stats()))
	}
	return "not ready: " + strings.Join(reasons, "; ")
}

// markPass records a pass of the main loop, for /healthz.
func (r *running) markPass() { r.lastPass.Store(time.Now().UnixNano()) }

// stalled reports how long ago the main loop last passed, when that is
// longer than it should ever be; 0 while the loop runs, and before it
// started (the relay is starting: /readyz says which step).
func (r *running) stalled() time.Duration {
	last, stale := r.lastPass.Load(), time.Duration(r.stale.Load())
	if last == 0 || stale == 0 {
		return 0
	}
	if ago := time.Since(time.Unix(0, last)); ago > stale {
		return ago
	}
	return 0
}
