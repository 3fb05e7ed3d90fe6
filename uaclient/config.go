package uaclient

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
)

// Mode says where a Pair keeps its data items.
type Mode string

const (
	// ModeWarm (the default) creates the data items only on the active
	// endpoint. The standby's session carries its own ServiceLevel and
	// heartbeat, and the items are created on it when it is promoted.
	ModeWarm Mode = "warm"
	// ModeHot also creates the data items on the standby, in the Sampling
	// monitoring mode: the standby server samples them but sends nothing.
	// A promotion switches them to Reporting instead of creating them, and
	// an item the standby's server rejects is known before it is needed.
	ModeHot Mode = "hot"
	// ModePrepared creates the data items on the standby too, in the
	// Disabled monitoring mode: the standby server neither samples nor
	// sends them (it only keeps them), and a promotion switches them to
	// Reporting, a call per batch instead of a CreateMonitoredItems per
	// batch. At thousands of tags that is what makes a switch fast (see
	// docs/servicelevel.md for the figures); it costs the standby server
	// the items' memory, not their sampling.
	ModePrepared Mode = "prepared"
)

// Defaults and ranges of PairConfig's own fields. The heartbeat and poll
// defaults are chosen so that a frozen link is noticed within 0.6 s and a
// connection that is Connected but gets no data within the same time. The
// heartbeat interval is also how long a server's ServiceLevel 0 can wait
// for its publishing cycle, the largest part of a planned failover: 50 ms
// halves it against 100 ms for two small Publish responses a second more
// per session.
const (
	DefaultHeartbeatIntervalMilliseconds = 50
	MinHeartbeatIntervalMilliseconds     = 10
	MaxHeartbeatIntervalMilliseconds     = 10000

	DefaultHeartbeatTimeoutMilliseconds = 600
	MaxHeartbeatTimeoutMilliseconds     = 600000

	DefaultPollIntervalMilliseconds = 1000
	MinPollIntervalMilliseconds     = 10
	MaxPollIntervalMilliseconds     = 600000

	DefaultReadTimeoutMilliseconds = 500
	MinReadTimeoutMilliseconds     = 10
	MaxReadTimeoutMilliseconds     = 60000

	DefaultPublishingIntervalMilliseconds = 100
	MinPublishingIntervalMilliseconds     = 1
	MaxPublishingIntervalMilliseconds     = 600000

	MinSamplingIntervalMilliseconds = 0
	MaxSamplingIntervalMilliseconds = 600000

	DefaultSubscribeBatchSize = 500
	MinSubscribeBatchSize     = 1
	MaxSubscribeBatchSize     = 10000

	MinQueueSize = 1
	MaxQueueSize = 65536

	DefaultBlipToleranceMilliseconds = 30000
	MinBlipToleranceMilliseconds     = 0
	MaxBlipToleranceMilliseconds     = 3600000
)

// PairConfig is the configuration of a Pair as written in a config file (JSON
// or YAML): the two endpoints, the failover rules (FailoverConfig, whose
// fields sit at the same level, as in the per-connection block of the
// ServiceLevel-aware failover design) and the Pair's own timing. Every absent
// or null field takes its default; an explicit value is kept, or rejected when
// out of range.
type PairConfig struct {
	// Endpoints are the two opc.tcp URLs of a redundant pair, the primary
	// first, then the backup, which must reach another server (not the
	// primary's host and port: see SameEndpoint; the Pair checks the
	// servers' ApplicationUris at run time too); or one URL for a single
	// server (no standby, no failover: the Pair follows its ServiceLevel
	// and reconnects to it).
	Endpoints []string `json:"endpoints" yaml:"endpoints"`

	// DiscoverPartner asks the one server of Endpoints for its partner in
	// a redundant set, and takes the partner's endpoint as the backup: the
	// server's ServerUriArray (or, without one, its ServerArray) names the
	// partner, FindServers on the server gives the partner's discovery
	// URLs, GetEndpoints there the endpoint that matches the security
	// settings. Until a partner is found the Pair runs as a single server;
	// it asks at every new session on the server and, while that session
	// lasts, every PartnerRetryInterval. Only with one endpoint: two give
	// the backup. Default false.
	DiscoverPartner bool `json:"discoverPartner,omitempty" yaml:"discoverPartner,omitempty"`

	// FailoverConfig holds serviceLevelFailover and the connectivity
	// retry knobs.
	servicelevel.FailoverConfig `yaml:",inline"`

	// Mode is "warm" (default) or "hot".
	Mode Mode `json:"mode,omitempty" yaml:"mode,omitempty"`

	// HeartbeatIntervalMilliseconds is the publishing interval of each
	// session's health subscription (ServiceLevel and CurrentTime) and the
	// sampling interval of its items. Default 50, valid 10-10000.
	HeartbeatIntervalMilliseconds *int `json:"heartbeatIntervalMilliseconds,omitempty" yaml:"heartbeatIntervalMilliseconds,omitempty"`
	// HeartbeatTimeoutMilliseconds is the gap check: a session whose
	// health subscription delivers nothing (neither a CurrentTime change
	// nor a keep-alive) for this long has lost its link. Default 600,
	// valid from twice the heartbeat interval to 600000.
	HeartbeatTimeoutMilliseconds *int `json:"heartbeatTimeoutMilliseconds,omitempty" yaml:"heartbeatTimeoutMilliseconds,omitempty"`
	// PollIntervalMilliseconds is how often each session's ServiceLevel is
	// also read. Default 1000, valid 10-600000.
	PollIntervalMilliseconds *int `json:"pollIntervalMilliseconds,omitempty" yaml:"pollIntervalMilliseconds,omitempty"`
	// ReadTimeoutMilliseconds bounds each ServiceLevel read, polls and
	// probes alike; a read past it means the session's link is lost.
	// Default 500, valid 10-60000.
	ReadTimeoutMilliseconds *int `json:"readTimeoutMilliseconds,omitempty" yaml:"readTimeoutMilliseconds,omitempty"`
	// PublishingIntervalMilliseconds is the publishing interval of the
	// data subscription. Default 100, valid 1-600000.
	PublishingIntervalMilliseconds *int `json:"publishingIntervalMilliseconds,omitempty" yaml:"publishingIntervalMilliseconds,omitempty"`
	// SamplingIntervalMilliseconds is the data items' sampling interval
	// unless an Item sets its own. Default: the publishing interval; valid
	// 0-600000 (0 asks the server for its fastest rate).
	SamplingIntervalMilliseconds *int `json:"samplingIntervalMilliseconds,omitempty" yaml:"samplingIntervalMilliseconds,omitempty"`
	// QueueSize is the data items' queue size unless an Item sets its
	// own. Default: each item's own, QueueSizeFor its sampling interval,
	// the publishing interval and the takeover window (102 at the default
	// 100 ms intervals and 10 s), so that an item loses no value while no
	// Publish request comes for the window; valid 1-65536.
	QueueSize *int `json:"queueSize,omitempty" yaml:"queueSize,omitempty"`
	// DiscardOldest is what a full item queue drops unless an Item says
	// otherwise: the oldest sample (default true) or the newest.
	DiscardOldest *bool `json:"discardOldest,omitempty" yaml:"discardOldest,omitempty"`
	// Filter is the data items' data-change filter unless an Item sets
	// its own. Default: report a change of status or value, no deadband.
	Filter *DataChangeFilter `json:"filter,omitempty" yaml:"filter,omitempty"`
	// SubscribeBatchSize is the most monitored items one request creates,
	// changes or deletes: servers limit operations per call
	// (MaxMonitoredItemsPerCall). Default 500, valid 1-10000.
	SubscribeBatchSize *int `json:"subscribeBatchSize,omitempty" yaml:"subscribeBatchSize,omitempty"`
	// BlipToleranceMilliseconds is the longest link blip (the connection
	// to a live server broken or frozen, then back) that loses nothing:
	// the session timeout and the subscriptions' lifetimes are asked for
	// so that the server keeps the session, its subscriptions and their
	// unacknowledged notifications that long, and the Pair activates the
	// same session on a new connection and asks for what it missed. 0
	// turns this off: a broken link always costs a new session. Default
	// 30000, valid 0-3600000.
	BlipToleranceMilliseconds *int `json:"blipToleranceMilliseconds,omitempty" yaml:"blipToleranceMilliseconds,omitempty"`
	// TakeoverWindowMilliseconds is the longest the client may be gone
	// (its process killed and started again, or a successor taking the
	// subscription over) without a value lost: the default queue sizes
	// hold this long at each item's sampling interval, and the data
	// subscription's lifetime is asked for at least this plus 10 s.
	// Default 10000 (a restart); a fleet relay sets its lease TTL + 1 s
	// when that is longer. Valid 0-3600000.
	TakeoverWindowMilliseconds *int `json:"takeoverWindowMilliseconds,omitempty" yaml:"takeoverWindowMilliseconds,omitempty"`
}

// PairSettings are a validated PairConfig with defaults applied.
type PairSettings struct {
	Endpoints          [2]string             // endpoints: primary, backup (the same URL twice for one server)
	Single             bool                  // one endpoint given: no standby, no failover (until a partner is found)
	DiscoverPartner    bool                  // discoverPartner: find the backup through the one server
	Failover           servicelevel.Settings // the embedded FailoverConfig
	Mode               Mode                  // mode
	HeartbeatInterval  time.Duration         // heartbeatIntervalMilliseconds
	HeartbeatTimeout   time.Duration         // heartbeatTimeoutMilliseconds
	PollInterval       time.Duration         // pollIntervalMilliseconds
	ReadTimeout        time.Duration         // readTimeoutMilliseconds
	PublishingInterval time.Duration         // publishingIntervalMilliseconds
	SamplingInterval   time.Duration         // samplingIntervalMilliseconds
	QueueSize          uint32                // queueSize; 0: each item's QueueSizeFor
	DiscardOldest      bool                  // discardOldest
	Filter             *DataChangeFilter     // filter; nil for the default
	BatchSize          int                   // subscribeBatchSize
	BlipTolerance      time.Duration         // blipToleranceMilliseconds
	TakeoverWindow     time.Duration         // takeoverWindowMilliseconds
}

// ValueError is an invalid field whose problem is not a range: an endpoint
// URL or a mode. Field is the path as written in the config, for example
// "endpoints[1]".
type ValueError struct {
	Field  string // the path as written, for example "endpoints[1]"
	Value  string // the value given
	Reason string // what is wrong with it
}

// Error renders "field: reason".
func (e *ValueError) Error() string { return e.Field + ": " + e.Reason }

// Validate reports every invalid field at once, joined with errors.Join;
// each is a *FieldError or a *ValueError. nil means the config is usable.
func (c PairConfig) Validate() error {
	_, err := c.Settings()
	return err
}

// Settings validates c and resolves its defaults. It shadows the embedded
// FailoverConfig.Settings; the failover part is PairSettings.Failover.
func (c PairConfig) Settings() (PairSettings, error) {
	var errs []error
	var s PairSettings

	switch len(c.Endpoints) {
	case 1:
		// One server: no standby and no failover. The Pair still follows
		// its ServiceLevel (status, write gate) and reconnects to it.
		if reason := checkEndpointURL(c.Endpoints[0]); reason != "" {
			errs = append(errs, &ValueError{Field: "endpoints[0]", Value: c.Endpoints[0], Reason: reason})
		}
		u := strings.TrimSpace(c.Endpoints[0])
		s.Endpoints = [2]string{u, u}
		s.Single = true
	case 2:
		for i, u := range c.Endpoints {
			if reason := checkEndpointURL(u); reason != "" {
				errs = append(errs, &ValueError{Field: fmt.Sprintf("endpoints[%d]", i), Value: u, Reason: reason})
			}
			s.Endpoints[i] = strings.TrimSpace(u)
		}
		if len(errs) == 0 {
			if why := sameServer(c.Endpoints[0], c.Endpoints[1]); why != "" {
				errs = append(errs, &ValueError{Field: "endpoints[1]", Value: c.Endpoints[1],
					Reason: "reaches the same server as endpoints[0]: " + why + "; the backup must be another server"})
			}
		}
	default:
		errs = append(errs, &ValueError{Field: "endpoints", Value: strings.Join(c.Endpoints, ","),
			Reason: fmt.Sprintf("%d given, want 1 (one server) or 2 (primary, backup)", len(c.Endpoints))})
	}

	if c.DiscoverPartner {
		s.DiscoverPartner = true
		if len(c.Endpoints) == 2 {
			errs = append(errs, &ValueError{Field: "discoverPartner", Value: "true",
				Reason: "finds the backup of a source with one endpoint, and endpoints gives two: " +
					"remove discoverPartner (the backup is endpoints[1]) or endpoints[1] (to find the backup)"})
		}
	}

	fs, err := c.FailoverConfig.Settings()
	if err != nil {
		errs = append(errs, err)
	}
	s.Failover = fs

	switch c.Mode {
	case "", ModeWarm:
		s.Mode = ModeWarm
	case ModeHot, ModePrepared:
		s.Mode = c.Mode
		if s.Single && !c.DiscoverPartner {
			errs = append(errs, &ValueError{Field: "mode", Value: string(c.Mode),
				Reason: fmt.Sprintf("%s keeps the data items on a standby server: it needs two endpoints, or discoverPartner", c.Mode)})
		}
	default:
		errs = append(errs, &ValueError{Field: "mode", Value: string(c.Mode),
			Reason: fmt.Sprintf("%q is not valid (valid: warm, hot, prepared)", string(c.Mode))})
	}

	resolve := func(field string, p *int, def, lo, hi int) int {
		if p == nil {
			return def
		}
		if *p < lo || *p > hi {
			errs = append(errs, &servicelevel.FieldError{Field: field, Value: *p, Min: lo, Max: hi})
			return def
		}
		return *p
	}
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }

	hb := resolve("heartbeatIntervalMilliseconds", c.HeartbeatIntervalMilliseconds,
		DefaultHeartbeatIntervalMilliseconds, MinHeartbeatIntervalMilliseconds, MaxHeartbeatIntervalMilliseconds)
	s.HeartbeatInterval = ms(hb)
	s.HeartbeatTimeout = ms(resolve("heartbeatTimeoutMilliseconds", c.HeartbeatTimeoutMilliseconds,
		max(DefaultHeartbeatTimeoutMilliseconds, 2*hb), 2*hb, MaxHeartbeatTimeoutMilliseconds))
	s.PollInterval = ms(resolve("pollIntervalMilliseconds", c.PollIntervalMilliseconds,
		DefaultPollIntervalMilliseconds, MinPollIntervalMilliseconds, MaxPollIntervalMilliseconds))
	s.ReadTimeout = ms(resolve("readTimeoutMilliseconds", c.ReadTimeoutMilliseconds,
		DefaultReadTimeoutMilliseconds, MinReadTimeoutMilliseconds, MaxReadTimeoutMilliseconds))
	pub := resolve("publishingIntervalMilliseconds", c.PublishingIntervalMilliseconds,
		DefaultPublishingIntervalMilliseconds, MinPublishingIntervalMilliseconds, MaxPublishingIntervalMilliseconds)
	s.PublishingInterval = ms(pub)
	s.SamplingInterval = ms(resolve("samplingIntervalMilliseconds", c.SamplingIntervalMilliseconds,
		pub, MinSamplingIntervalMilliseconds, MaxSamplingIntervalMilliseconds))
	s.QueueSize = uint32(resolve("queueSize", c.QueueSize, 0, MinQueueSize, MaxQueueSize))
	s.DiscardOldest = c.DiscardOldest == nil || *c.DiscardOldest
	if c.Filter != nil {
		if err := c.Filter.Validate("filter"); err != nil {
			errs = append(errs, err)
		}
		f := *c.Filter
		s.Filter = &f
	}
	s.BatchSize = resolve("subscribeBatchSize", c.SubscribeBatchSize, DefaultSubscribeBatchSize, MinSubscribeBatchSize, MaxSubscribeBatchSize)
	s.BlipTolerance = ms(resolve("blipToleranceMilliseconds", c.BlipToleranceMilliseconds,
		DefaultBlipToleranceMilliseconds, MinBlipToleranceMilliseconds, MaxBlipToleranceMilliseconds))
	s.TakeoverWindow = ms(resolve("takeoverWindowMilliseconds", c.TakeoverWindowMilliseconds,
		DefaultTakeoverWindowMilliseconds, MinTakeoverWindowMilliseconds, MaxTakeoverWindowMilliseconds))

	if len(errs) > 0 {
		return PairSettings{}, errors.Join(errs...)
	}
	return s, nil
}

// checkEndpointURL returns why u is not a usable endpoint, or "".
func checkEndpointURL(u string) string {
	s := strings.TrimSpace(u)
	if s == "" {
		return "empty: want an opc.tcp://host:port URL"
	}
	pu, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URL: %v", s, err)
	case !strings.EqualFold(pu.Scheme, "opc.tcp"):
		return fmt.Sprintf("%q is not an opc.tcp:// URL", s)
	case pu.Hostname() == "":
		return fmt.Sprintf("%q has no host", s)
	}
	if port := pu.Port(); port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Sprintf("%q: port %s is out of range (valid 1-65535)", s, port)
		}
	}
	return ""
}

// SameEndpoint reports whether two endpoint URLs reach the same server, so
// that a pair's config can reject a backup that is its own primary (a
// "failover" to it would reconnect to the server being left, and the
// relay would report a standby that does not exist). Two URLs reach the
// same server when they have the same host and port: one port is one
// listening process, whatever the path after it. Hosts compare
// case-insensitively, every loopback spelling (localhost, 127.x.y.z, ::1)
// is this machine, an IP address compares by value, and a missing opc.tcp
// port is 4840. It does no I/O: two names of one host, or a port forwarded
// to another, are not detected here (the Pair's run-time check of the
// servers' ApplicationUri catches them).
func SameEndpoint(a, b string) bool { return sameServer(a, b) != "" }

// sameServer says why a and b reach the same server, or "" if, as far as
// their URLs tell, they do not. A URL without a host (refused on its own)
// is compared whole.
func sameServer(a, b string) string {
	ha, pa, oka := serverAddr(a)
	hb, pb, okb := serverAddr(b)
	if !oka || !okb {
		if normalizeEndpoint(a) == normalizeEndpoint(b) {
			return "the same URL"
		}
		return ""
	}
	if ha != hb || pa != pb {
		return ""
	}
	if normalizeEndpoint(a) == normalizeEndpoint(b) {
		return fmt.Sprintf("same host and port (the same URL, %s)", normalizeEndpoint(a))
	}
	if ha == loopbackHost {
		na, nb := hostOf(a), hostOf(b)
		if !strings.EqualFold(na, nb) {
			return fmt.Sprintf("same host and port (%s and %s both name this machine; port %s)", na, nb, pa)
		}
	}
	return fmt.Sprintf("same host and port (%s; the path does not choose the server)", net.JoinHostPort(hostOf(a), pa))
}

// loopbackHost is serverAddr's host for every loopback spelling.
const loopbackHost = "loopback"

// serverAddr returns the host and port an endpoint URL connects to, in a
// form that compares: the host lowercased without a trailing dot, an IP
// address in its canonical text, loopbackHost for localhost and every
// loopback address; the port 4840 when an opc.tcp URL gives none. ok is
// false for a URL without a host.
func serverAddr(raw string) (host, port string, ok bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Hostname() == "" {
		return "", "", false
	}
	host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
		if ip.IsLoopback() {
			host = loopbackHost
		}
	} else if host == "localhost" {
		host = loopbackHost
	}
	port = u.Port()
	if port == "" && strings.EqualFold(u.Scheme, "opc.tcp") {
		port = "4840"
	}
	return host, port, true
}

// hostOf returns the host of an endpoint URL as written, for messages.
func hostOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return raw
	}
	return u.Hostname()
}

func normalizeEndpoint(raw string) string {
	s := strings.TrimSpace(raw)
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return strings.ToLower(strings.TrimSuffix(s, "/"))
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	scheme := strings.ToLower(u.Scheme)
	if port == "" && scheme == "opc.tcp" {
		port = "4840"
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	}
	return scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/")
}
