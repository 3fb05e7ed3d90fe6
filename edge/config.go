package edge

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/apbridge/apbridge/bridge/jetstreamsink"
)

// Config is the relay's view of the hub side of an edge site, and what it
// must warn about. The site side, the stream the relay stores into and its
// domain, is the JetStream sink's configuration (jetstream.domain,
// jetstream.stream and its limits).
//
//	edge:
//	  hub: {domain: hub, stream: PLANT}
//	  outageFloor: 8h
type Config struct {
	// Hub names the hub's JetStream domain and the stream there that
	// sources the site stream.
	Hub Hub `yaml:"hub" json:"hub"`
	// OutageFloor is the longest WAN outage the site must ride out: the
	// relay warns (status, log, metric) when the site stream, at the
	// current rate, could absorb a shorter one before a limit discards
	// anything. Required, 1m-8760h (a year).
	OutageFloor time.Duration `yaml:"outageFloor" json:"outageFloor"`
	// CheckInterval is how often the relay checks the site stream and
	// the hub, 1s-1h, default 30s.
	CheckInterval time.Duration `yaml:"checkInterval,omitempty" json:"checkInterval,omitempty"`
	// RateWindow is how far back the site stream's rate is measured,
	// 1s-24h, default 1m.
	RateWindow time.Duration `yaml:"rateWindow,omitempty" json:"rateWindow,omitempty"`
}

// Hub is the hub side of an edge site.
type Hub struct {
	// Domain is the hub's JetStream domain: the relay asks
	// $JS.<domain>.API about the hub stream, across the leaf node
	// connection. Required.
	Domain string `yaml:"domain" json:"domain"`
	// Stream is the hub stream that sources the site stream. Required.
	Stream string `yaml:"stream" json:"stream"`
}

// Site is the site side as the relay knows it: the sink's stream and
// domain.
type Site struct {
	Domain, Stream string
}

// DefaultCheckInterval and DefaultRateWindow are the defaults of
// CheckInterval and RateWindow.
const (
	DefaultCheckInterval = 30 * time.Second
	DefaultRateWindow    = time.Minute
)

func (c *Config) setDefaults() {
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.RateWindow == 0 {
		c.RateWindow = DefaultRateWindow
	}
}

// Validate checks every field after applying the defaults and reports
// every problem at once (errors.Join), each naming its field as spelled
// in YAML (edge.hub.domain) and the allowed values.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("edge.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	switch {
	case c.Hub.Domain == "":
		bad("hub.domain", "required: the hub's JetStream domain (letters, digits, '-' and '_', 1-64 characters)")
	case !jetstreamsink.ValidDomain(c.Hub.Domain):
		bad("hub.domain", "%q is not a JetStream domain (valid: letters, digits, '-' and '_', 1-64 characters)", c.Hub.Domain)
	}
	switch {
	case c.Hub.Stream == "":
		bad("hub.stream", "required: the hub stream that sources the site stream")
	case !validStreamName(c.Hub.Stream):
		bad("hub.stream", "%q is not a stream name (1-255 characters, none of . * > / \\, spaces or control characters)", c.Hub.Stream)
	}
	if c.OutageFloor < time.Minute || c.OutageFloor > 8760*time.Hour {
		bad("outageFloor", "%v is out of range (valid 1m-8760h): the longest WAN outage the site must ride out", c.OutageFloor)
	}
	if c.CheckInterval < time.Second || c.CheckInterval > time.Hour {
		bad("checkInterval", "%v is out of range (valid 1s-1h)", c.CheckInterval)
	}
	if c.RateWindow < time.Second || c.RateWindow > 24*time.Hour {
		bad("rateWindow", "%v is out of range (valid 1s-24h)", c.RateWindow)
	}
	return errors.Join(errs...)
}

// validStreamName is the rule jetstream.stream follows.
func validStreamName(s string) bool {
	return s != "" && len(s) <= 255 && !strings.ContainsAny(s, ">*. /\\") && strings.IndexFunc(s, unicode.IsControl) < 0
}

// WithDefaults returns c with the defaults applied.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}
