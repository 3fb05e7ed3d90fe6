package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/edge"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/apbridge/apbridge/wire"
)

// Config is a relay's configuration: the file `apbridge run --config`
// reads, and what Start builds a relay from. docs/configuration.md
// describes every field; examples/site.yaml is a commented example.
type Config struct {
	// Instance names the relay in its status, logs and micro service
	// (default wire.DefaultInstance).
	Instance string `yaml:"instance"`
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string `yaml:"logLevel"`
	// HTTP serves /healthz, /readyz and /metrics.
	HTTP HTTPConfig `yaml:"http"`
	// NATS is the cluster the relay publishes to.
	NATS NATSConfig `yaml:"nats"`
	// Service sets the subjects of the relay's own services.
	Service ServiceConfig `yaml:"service"`
	// Subject is the template of tag subjects (default
	// wire.DefaultSubject).
	Subject string `yaml:"subject"`
	// NoHeaders leaves quality and timestamps out of NATS headers.
	NoHeaders bool `yaml:"noHeaders"`
	// Subscribe tunes the subscribe-storm guard of every source.
	Subscribe SubscribeConfig `yaml:"subscribe"`
	// Sink is "core" (default: updates are published on core NATS) or
	// "jetstream" (stored exactly once in a stream; see docs/jetstream.md),
	// with its settings under jetstream.
	SinkConfig `yaml:",inline"`
	// Sources are the OPC UA server pairs and their tags.
	Sources []SourceConfig `yaml:"sources"`
	// Fleet, when set, makes the relay one of a fleet that divides the
	// sources between its relays (config_fleet.go).
	Fleet *FleetConfig `yaml:"fleet"`
	// Edge, when set, makes the relay the relay of an edge site: it
	// stores into a stream of the site's JetStream domain (jetstream.domain)
	// and watches the hub stream that sources it (config_edge.go,
	// docs/edge.md).
	Edge *edge.Config `yaml:"edge"`
	// StateDir is a directory the relay owns, where it keeps per OPC UA
	// source what a successor (the relay restarted) needs to take the
	// servers' subscriptions over (state.go). Empty: none is kept.
	StateDir string `yaml:"stateDir"`

	// subs are the values Parse took from the environment, which the
	// config service never shows (Redacted).
	subs []substitution
}

// Sink kinds, the values of SinkConfig.Sink.
const (
	// SinkCore publishes on core NATS through the ApConnection: at most
	// once, the fastest, nothing stored.
	SinkCore = "core"
	// SinkJetStream stores every update in a replicated JetStream stream,
	// exactly once by message ID, through every failover.
	SinkJetStream = "jetstream"
)

// SinkConfig chooses where the bridge puts tag updates. The YAML config of
// `apbridge run` embeds it at its top level:
//
//	sink: jetstream
//	jetstream:
//	  stream: PLANT
//	  replicas: 3
type SinkConfig struct {
	// Sink is "core" (the default) or "jetstream".
	Sink string `yaml:"sink,omitempty" json:"sink,omitempty"`
	// JetStream configures the stream and the publishing; it is read only
	// when Sink is "jetstream".
	JetStream jetstreamsink.Config `yaml:"jetstream,omitempty" json:"jetstream,omitzero"`
}

// Validate checks the sink kind and the stream settings, and refuses
// stream settings with another sink: they would do nothing, and a relay
// meant to store every update exactly once would publish at most once.
// Errors name the YAML field and the allowed values; every problem is
// reported (Errors splits them).
func (c SinkConfig) Validate() error {
	switch c.Sink {
	case "", SinkCore:
		if c.hasJetStream() {
			return errors.Join(errUnusedJetStream(c.Sink), c.JetStream.Validate())
		}
		return nil
	case SinkJetStream:
		return c.JetStream.Validate()
	}
	err := fmt.Errorf("sink: %q is not a sink (valid: %s, %s)", c.Sink, SinkCore, SinkJetStream)
	if c.hasJetStream() {
		return errors.Join(err, c.JetStream.Validate())
	}
	return err
}

// HTTPConfig is the health and metrics listener.
type HTTPConfig struct {
	// Listen is host:port; "" turns the listener off. Default ":9464".
	Listen *string `yaml:"listen"`
}

// NATSConfig is the connection to the NATS cluster.
type NATSConfig struct {
	Servers          []string  `yaml:"servers"`
	Name             string    `yaml:"name"`
	LameDuckHandling *string   `yaml:"lameDuckHandling"`
	Credentials      string    `yaml:"credentials"`
	User             string    `yaml:"user"`
	Password         string    `yaml:"password"`
	Token            string    `yaml:"token"`
	TLS              *TLSFiles `yaml:"tls"`
	// FailOnAuthError makes the start fail at once when the servers refuse
	// the credentials (the process exits non-zero), instead of retrying
	// until the start times out. Each refusal is logged either way.
	FailOnAuthError bool `yaml:"failOnAuthError"`
	// FastCutover trades strict per-publisher order at a switch for a
	// bounded hold instead of a round trip to the old broker; it pays off
	// across long links (see docs/apconn.md).
	FastCutover bool `yaml:"fastCutover"`
}

// TLSFiles are the PEM files of a TLS client.
type TLSFiles struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// ServiceConfig sets the relay's service subjects.
type ServiceConfig struct {
	// Prefix starts the service subjects (wire.ServiceSubjects; default
	// wire.DefaultPrefix).
	Prefix string `yaml:"prefix"`
	// Name is the micro service's name (default wire.DefaultServiceName):
	// give relays with different prefixes different names to tell them
	// apart in `nats micro ls`.
	Name string `yaml:"name"`
	// TrustRequestInfo declares that write requests reach the relay only
	// through a NATS service import, so the Nats-Request-Info header of a
	// write was set by the server and the write log may name its user as
	// verified (bridge.Config.TrustRequestInfo, docs/security.md).
	TrustRequestInfo bool `yaml:"trustRequestInfo"`
}

// SubscribeConfig tunes the guard; zero fields take the defaults.
type SubscribeConfig struct {
	RetryFloor      time.Duration `yaml:"retryFloor"`
	RetryCeiling    time.Duration `yaml:"retryCeiling"`
	InFlightCeiling time.Duration `yaml:"inFlightCeiling"`
}

// SourceConfig is one source: an OPC UA server pair or server (type
// opcua, the default), or an MxAccess gateway pair or gateway (type
// mxgateway, whose settings are in MxGateway).
type SourceConfig struct {
	Name string `yaml:"name"`
	// Type is "opcua" (the default) or "mxgateway".
	Type string `yaml:"type"`
	// The pair's endpoints, failover rules and timing.
	uaclient.PairConfig `yaml:",inline"`
	Security            opcuasource.Security `yaml:"security"`
	// Tags are listed tags, each with optional monitoring overrides.
	Tags []opcuasource.TagConfig `yaml:"tags"`
	// Groups are tags that share monitoring overrides.
	Groups []opcuasource.TagGroup   `yaml:"groups"`
	Browse []opcuasource.BrowseRoot `yaml:"browse"`
	// MxGateway is a type: mxgateway source's settings; in YAML they sit
	// at the source's own level (see MxGatewayConfig).
	MxGateway MxGatewayConfig `yaml:"-"`
}

// tagEntry is a listed tag and where its config is, for messages.
type tagEntry struct {
	// src is its source's path (sources[2]), group its group's index
	// (-1: in tags), idx its index in its list.
	src        string
	group, idx int
	tag        opcuasource.TagConfig
	// mon is the tag's monitoring with its group's applied.
	mon opcuasource.Monitoring
}

// field is the path of the tag's config (sources[2].groups[0].tags[5]),
// worked out only for a message: a config has thousands of tags.
func (e tagEntry) field() string {
	if e.group < 0 {
		return fmt.Sprintf("%s.tags[%d]", e.src, e.idx)
	}
	return fmt.Sprintf("%s.groups[%d].tags[%d]", e.src, e.group, e.idx)
}

// listedTags returns the source's tags and those of its groups, in order.
func (s SourceConfig) listedTags(f string) []tagEntry {
	n := len(s.Tags)
	for _, grp := range s.Groups {
		n += len(grp.Tags)
	}
	out := make([]tagEntry, 0, n)
	for j, t := range s.Tags {
		out = append(out, tagEntry{f, -1, j, t, t.Monitoring})
	}
	for g, grp := range s.Groups {
		for j, t := range grp.Tags {
			out = append(out, tagEntry{f, g, j, t, t.Monitoring.Over(grp.Monitoring)})
		}
	}
	return out
}

// Validate checks every field and reports every problem at once, each
// naming its field and the allowed values (Errors splits them).
func (c *Config) Validate() error { return c.validate(false) }

// validate is Validate; withSources allows a config without sources of its
// own, for a relay given sources by the caller (WithSource).
func (c *Config) validate(withSources bool) error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		add("logLevel: %q is not valid (valid: debug, info, warn, error)", c.LogLevel)
	}
	c.checkListen(add)
	c.checkNATS(add)
	checkStateDir(c.StateDir, add)
	if c.NATS.LameDuckHandling != nil {
		if _, err := ldm.Parse(*c.NATS.LameDuckHandling); err != nil {
			add("nats.lameDuckHandling: %q is not valid (valid: NONE, SWITCH_TO_PASSIVE, PASSIVE_ONLY)", *c.NATS.LameDuckHandling)
		}
	}
	auth := 0
	for _, set := range []bool{c.NATS.Credentials != "", c.NATS.User != "", c.NATS.Token != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		add("nats: credentials, user/password and token are alternatives: give one")
	}
	if (c.NATS.User == "") != (c.NATS.Password == "") {
		add("nats: user and password go together")
	}
	if c.Service.Prefix != "" {
		if err := wire.ValidateSubject(c.Service.Prefix); err != nil {
			add("service.prefix: %v", err)
		}
	}
	if c.Service.Name != "" {
		if err := bridge.ValidateServiceName(c.Service.Name); err != nil {
			add("service.name: %v", err)
		}
	}
	if c.Subject != "" {
		if _, err := wire.NewMapper(c.Subject); err != nil {
			add("subject: %v", err)
		}
	}
	for _, e := range Errors(c.guard().Validate()) {
		add("%v", e)
	}
	if err := c.SinkConfig.Validate(); err != nil {
		for _, e := range Errors(err) {
			add("%v", e)
		}
	}
	c.validateFleet(add)
	c.validateEdge(add)
	c.checkNames(add)
	if len(c.Sources) == 0 && !withSources {
		add("sources: at least one source is required")
	}
	names := map[string]bool{}
	for i, s := range c.Sources {
		f := fmt.Sprintf("sources[%d]", i)
		if s.Name == "" {
			add("%s.name: required", f)
		} else if names[s.Name] {
			add("%s.name: %q is used by another source", f, s.Name)
		}
		names[s.Name] = true
		switch s.Type {
		case "", TypeOPCUA:
		case TypeMxGateway:
			s.validateMx(f, add)
			continue
		default:
			add("%s.type: %q is not valid (valid: opcua, mxgateway)", f, s.Type)
			continue
		}
		if err := s.PairConfig.Validate(); err != nil {
			for _, e := range Errors(err) {
				add("%s.%v", f, e)
			}
		}
		if err := s.Security.ValidateFor(f+".security", len(s.Endpoints), s.DiscoverPartner); err != nil {
			for _, e := range Errors(err) {
				add("%v", e)
			}
		}
		checkSecurityFiles(f, s.Security, add)
		listed := s.listedTags(f)
		if len(listed) == 0 && len(s.Browse) == 0 {
			add("%s: give tags, groups, browse roots, or a mix", f)
		}
		for g, grp := range s.Groups {
			gf := fmt.Sprintf("%s.groups[%d]", f, g)
			if len(grp.Tags) == 0 {
				add("%s.tags: a group needs tags", gf)
			}
			for _, e := range Errors(grp.Monitoring.Validate(gf + ".")) {
				add("%v", e)
			}
		}
		seen := make(map[string]bool, len(listed))
		for _, e := range listed {
			t := e.tag
			if !t.Monitoring.IsZero() {
				for _, err := range Errors(t.Monitoring.Validate(e.field() + ".")) {
					add("%v", err)
				}
			}
			checkTag(e.field, t.TagConfig, seen, add)
			if t.Address == "" {
				add("%s.address: required (an OPC UA node ID such as ns=2;s=Line1.Temp)", e.field())
			} else if err := opcuasource.ValidateNodeID(t.Address); err != nil {
				add("%s.address: %q is not a node ID: %v", e.field(), t.Address, err)
			}
		}
		for j, b := range s.Browse {
			for _, e := range Errors(b.Validate(fmt.Sprintf("%s.browse[%d]", f, j))) {
				add("%v", e)
			}
		}
	}
	c.checkSubjects(add, withSources)
	return errors.Join(errs...)
}

// checkTag checks what every tag has, whatever its source: a name unique
// in the source and a valid subject, if it has its own. tf gives its
// field path; seen collects the names.
func checkTag(tf func() string, t bridge.TagConfig, seen map[string]bool, add func(string, ...any)) {
	switch {
	case t.Name == "":
		add("%s.name: required", tf())
	case seen[t.Name]:
		add("%s.name: tag %q is listed twice", tf(), t.Name)
	}
	seen[t.Name] = true
	if t.Subject != "" {
		if err := wire.ValidateSubject(t.Subject); err != nil {
			add("%s.subject: %v", tf(), err)
		}
	}
}

// Errors unwraps the errors.Join of Validate, Parse and Load into its
// parts, one problem each; nil gives none.
func Errors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	return []error{err}
}

func (c *Config) guard() bridge.GuardConfig {
	g := bridge.DefaultGuardConfig()
	if c.Subscribe.RetryFloor != 0 {
		g.RetryFloor = c.Subscribe.RetryFloor
	}
	if c.Subscribe.RetryCeiling != 0 {
		g.RetryCeiling = c.Subscribe.RetryCeiling
	}
	if c.Subscribe.InFlightCeiling != 0 {
		g.InFlightCeiling = c.Subscribe.InFlightCeiling
	}
	return g
}

func (c *Config) handling() ldm.LameDuckHandling {
	if c.NATS.LameDuckHandling == nil {
		return ldm.Default
	}
	h, _ := ldm.Parse(*c.NATS.LameDuckHandling)
	return h
}

// HTTPListen returns the health and metrics listener's address: the
// configured one, ":9464" by default, "" when turned off.
func (c *Config) HTTPListen() string {
	if c.HTTP.Listen == nil {
		return ":9464"
	}
	return *c.HTTP.Listen
}
