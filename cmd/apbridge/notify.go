package main

import (
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// notifier speaks systemd's notify protocol (sd_notify(3)) to the service
// manager when the relay runs under one (NOTIFY_SOCKET is set: a unit of
// Type=notify), and does nothing otherwise: run by hand, in a container,
// as a Windows service.
//
//	STATUS=...   each step of the start, then a one-line state per pass
//	READY=1      once NATS is connected and the sources are started
//	WATCHDOG=1   from each pass of the main loop (serve.go), never
//	             from a goroutine of its own
//	STOPPING=1   when the drain begins
type notifier struct {
	log zerolog.Logger
	// watchdog is the service manager's watchdog timeout (WatchdogSec=,
	// given as WATCHDOG_USEC), 0 without one.
	watchdog time.Duration
	// send sends one message; nil when no service manager listens.
	send func(state string) error

	mu         sync.Mutex
	lastStatus string
	failed     bool // a send failed: logged once, not at every pass
}

// newNotifier reads the service manager's environment. The variables are
// left set: the relay starts no process that could inherit them by
// mistake.
func newNotifier(log zerolog.Logger) *notifier {
	n := &notifier{log: log}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn().Err(err).Msg("systemd watchdog: WATCHDOG_USEC unusable; running without the watchdog")
	}
	n.watchdog = wd
	if os.Getenv("NOTIFY_SOCKET") != "" {
		n.send = func(state string) error {
			_, err := daemon.SdNotify(false, state)
			return err
		}
	}
	return n
}

// active reports whether a service manager listens.
func (n *notifier) active() bool { return n != nil && n.send != nil }

func (n *notifier) notify(state string) {
	if !n.active() {
		return
	}
	if err := n.send(state); err != nil {
		n.mu.Lock()
		first := !n.failed
		n.failed = true
		n.mu.Unlock()
		if first {
			n.log.Warn().Err(err).Str("state", strings.SplitN(state, "=", 2)[0]).Msg("systemd notify failed; later failures are not logged")
		}
	}
}

// status sends STATUS=line when line differs from the last one sent.
func (n *notifier) status(line string) {
	if !n.active() {
		return
	}
	line = oneLine(line)
	n.mu.Lock()
	same := line == n.lastStatus
	n.lastStatus = line
	n.mu.Unlock()
	if !same {
		n.notify("STATUS=" + line)
	}
}

// ready sends READY=1 with the status line in the same message, so that
// `systemctl status` never shows the service active with a starting
// step as its status.
func (n *notifier) ready(line string) {
	if !n.active() {
		return
	}
	line = oneLine(line)
	n.mu.Lock()
	n.lastStatus = line
	n.mu.Unlock()
	n.notify(daemon.SdNotifyReady + "\nSTATUS=" + line)
}

// alive sends WATCHDOG=1.
func (n *notifier) alive() {
	if n.active() && n.watchdog > 0 {
		n.notify(daemon.SdNotifyWatchdog)
	}
}

// stopping sends STOPPING=1 and the status.
func (n *notifier) stopping(line string) {
	if !n.active() {
		return
	}
	n.notify(daemon.SdNotifyStopping + "\nSTATUS=" + oneLine(line))
}

// maxStatus keeps STATUS= short: systemctl status shows one line.
const maxStatus = 200

// oneLine makes s fit a STATUS= field: one line, at most maxStatus bytes
// (cut at a rune boundary).
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= maxStatus {
		return s
	}
	cut := maxStatus - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
