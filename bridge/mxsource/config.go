package mxsource

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/apbridge/apbridge/internal/tlsconf"
)

// Modes of the standby gateway session.
const (
	// ModeWarm keeps the standby session open, registered and its items
	// added but not advised: the standby costs the gateway nothing per
	// data change, and a promotion advises the items.
	ModeWarm = "warm"
	// ModeHot advises the items on the standby too: a promotion sends no
	// command and replays the standby's last values, at the price of every
	// data change crossing both gateways.
	ModeHot = "hot"
)

// Config is a source on one MxAccess gateway or a pair of them. Zero
// fields take the defaults (Defaults says which).
type Config struct {
	// Endpoints are the gateways, host:port: the primary and, optionally,
	// the backup.
	Endpoints []string `yaml:"endpoints" json:"endpoints"`
	// WriteUserID is the MXAccess user writes are made as; 0 (the
	// default) opens supervisory sessions, whose advises are supervisory.
	WriteUserID int32 `yaml:"writeUserId" json:"writeUserId,omitempty"`
	// CommandTimeout is the command deadline asked of the gateway at
	// OpenSession (default 60 s, valid 1s-10m): long enough that a slow
	// but healthy bulk subscribe is not taken for a failure.
	CommandTimeout time.Duration `yaml:"commandTimeout" json:"commandTimeout,omitempty"`
	// SubscribeParallelism is how many per-item supervisory advises are
	// pipelined on a gateway without a supervisory bulk subscribe
	// (default 16, valid 1-128: the gateway queues at most 128 commands).
	SubscribeParallelism int `yaml:"subscribeParallelism" json:"subscribeParallelism,omitempty"`
	// SubscribeBatchSize is the most items one bulk command carries
	// (default 1000, valid 1-10000): the gateway sends every advised
	// item's current value at once, and its event queue (10,000 per
	// session) must hold them beside the data that keeps changing.
	SubscribeBatchSize int `yaml:"subscribeBatchSize" json:"subscribeBatchSize,omitempty"`
	// Mode is "warm" (default) or "hot": how ready the standby is.
	Mode string `yaml:"mode" json:"mode,omitempty"`
	// ProbeInterval is how often the active session is pinged (default
	// 2 s, valid 100ms-1m).
	ProbeInterval time.Duration `yaml:"probeInterval" json:"probeInterval,omitempty"`
	// ProbeTimeout is how long a ping may take before the active is taken
	// for dead and a live standby promoted (default 5 s, valid 100ms-10m).
	ProbeTimeout time.Duration `yaml:"probeTimeout" json:"probeTimeout,omitempty"`
	// HeartbeatTimeout is how long an event stream may stay silent,
	// heartbeats included, before its session is taken for dead (default
	// 3 heartbeat intervals of the gateway, at least 1 s; valid 100ms-10m;
	// never less than 2 intervals; a gateway that sends no heartbeats is
	// not watched).
	HeartbeatTimeout time.Duration `yaml:"heartbeatTimeout" json:"heartbeatTimeout,omitempty"`
	// ReconnectDelay is the first wait before a session is opened again
	// after a failure; it doubles to 30 s (default 1 s, valid 10ms-1m).
	ReconnectDelay time.Duration `yaml:"reconnectDelay" json:"reconnectDelay,omitempty"`
	// ClientName names the relay in the gateway's logs (default
	// "apbridge").
	ClientName string `yaml:"clientName" json:"clientName,omitempty"`
	// TLS secures the gRPC channels; without it they are plaintext.
	TLS *TLSConfig `yaml:"tls" json:"tls,omitempty"`
	// Token is a bearer token sent on every call (needs TLS).
	Token string `yaml:"token" json:"-"`
}

// TLSConfig is a gRPC channel's TLS: PEM files.
type TLSConfig struct {
	// CA verifies the gateways' certificates (default: the system's).
	CA string `yaml:"ca" json:"ca,omitempty"`
	// Cert and Key are the client's certificate, for a gateway that asks
	// for one.
	Cert string `yaml:"cert" json:"cert,omitempty"`
	Key  string `yaml:"key" json:"key,omitempty"`
	// ServerName overrides the name the certificate must carry (default:
	// the endpoint's host).
	ServerName string `yaml:"serverName" json:"serverName,omitempty"`
}

// Defaults returns c with every zero field set to its default.
func (c Config) Defaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.CommandTimeout, 60*time.Second)
	set(&c.ProbeInterval, 2*time.Second)
	set(&c.ProbeTimeout, 5*time.Second)
	set(&c.ReconnectDelay, time.Second)
	if c.SubscribeParallelism == 0 {
		c.SubscribeParallelism = 16
	}
	if c.SubscribeBatchSize == 0 {
		c.SubscribeBatchSize = 1000
	}
	if c.Mode == "" {
		c.Mode = ModeWarm
	}
	if c.ClientName == "" {
		c.ClientName = "apbridge"
	}
	return c
}

// Validate checks every field; each error names its field (as in the
// YAML) and the allowed range. Zero fields are valid: they take defaults.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch n := len(c.Endpoints); {
	case n == 0:
		add("endpoints: one or two gateways (host:port) are required")
	case n > 2:
		add("endpoints: %d given (valid: one gateway, or a primary and a backup)", n)
	}
	seen := map[string]bool{}
	for i, ep := range c.Endpoints {
		if err := checkEndpoint(ep); err != nil {
			add("endpoints[%d]: %v", i, err)
		} else if seen[ep] {
			add("endpoints[%d]: %q is listed twice (a pair needs two gateways)", i, ep)
		}
		seen[ep] = true
	}
	if c.WriteUserID < 0 {
		add("writeUserId: %d is out of range (valid: 0 for supervisory, or a positive MXAccess user id)", c.WriteUserID)
	}
	dur := func(field string, d, lo, hi time.Duration) {
		if d != 0 && (d < lo || d > hi) {
			add("%s: %v is out of range (valid %v-%v)", field, d, lo, hi)
		}
	}
	dur("commandTimeout", c.CommandTimeout, time.Second, 10*time.Minute)
	dur("probeInterval", c.ProbeInterval, 100*time.Millisecond, time.Minute)
	dur("probeTimeout", c.ProbeTimeout, 100*time.Millisecond, 10*time.Minute)
	dur("heartbeatTimeout", c.HeartbeatTimeout, 100*time.Millisecond, 10*time.Minute)
	dur("reconnectDelay", c.ReconnectDelay, 10*time.Millisecond, time.Minute)
	if p := c.SubscribeParallelism; p != 0 && (p < 1 || p > 128) {
		add("subscribeParallelism: %d is out of range (valid 1-128)", p)
	}
	if b := c.SubscribeBatchSize; b != 0 && (b < 1 || b > 10000) {
		add("subscribeBatchSize: %d is out of range (valid 1-10000)", b)
	}
	switch c.Mode {
	case "", ModeWarm, ModeHot:
	default:
		add("mode: %q is not valid (valid: warm, hot)", c.Mode)
	}
	if c.Token != "" && c.TLS == nil {
		add("token: a token needs tls (it would travel in the clear)")
	}
	if t := c.TLS; t != nil {
		if (t.Cert == "") != (t.Key == "") {
			add("tls: cert and key go together")
		}
		for _, f := range []struct{ name, path string }{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}} {
			if f.path != "" {
				if _, err := os.Stat(f.path); err != nil {
					add("tls.%s: %v", f.name, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func checkEndpoint(ep string) error {
	if strings.Contains(ep, "://") {
		return fmt.Errorf("%q: give host:port, without a scheme", ep)
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("%q is not host:port (%v)", ep, err)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", ep)
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is out of range (valid 1-65535)", ep, port)
	}
	return nil
}

// tlsConfig builds the channel's TLS configuration, nil for plaintext.
func (c Config) tlsConfig() (*tls.Config, error) {
	if t := c.TLS; t != nil {
		return tlsconf.Client("tls", t.CA, t.Cert, t.Key, t.ServerName)
	}
	return nil, nil
}

// heartbeatTimeout is how long the stream of a session that announced
// heartbeats every hb may stay silent.
func (c Config) heartbeatTimeout(hb time.Duration) time.Duration {
	if hb <= 0 {
		return 0
	}
	if c.HeartbeatTimeout > 0 {
		// Never below two intervals: one late heartbeat is no death.
		return max(c.HeartbeatTimeout, 2*hb)
	}
	return max(3*hb, time.Second)
}
