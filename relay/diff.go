package relay

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/opcuasource"
)

// Plan is what applying a new config to a running relay would change:
// Diff works it out, Relay.Apply makes it. docs/configuration.md lists
// what changes live and what takes a restart.
type Plan struct {
	// Restart names each change that only a restart applies, one line
	// per field ("nats.servers: changed; a restart applies it"). A plan
	// with any is refused whole: nothing of the new config is applied.
	Restart []string `json:"restart,omitempty"`
	// AddSources and RemoveSources name the sources that start and stop.
	AddSources    []string `json:"addSources,omitempty"`
	RemoveSources []string `json:"removeSources,omitempty"`
	// ReplaceSources name the sources whose own settings changed
	// (endpoints, failover, security, the gateway's settings): each is
	// stopped and started again alone, with a new session.
	ReplaceSources []string `json:"replaceSources,omitempty"`
	// Tags are the tag changes of the sources that stay, in the new
	// config's order.
	Tags []SourceTagPlan `json:"tags,omitempty"`
}

// SourceTagPlan is what a plan does to one source's tags.
type SourceTagPlan struct {
	Source string   `json:"source"`
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
	// Change are the tags whose config changed, each with the fields.
	Change []TagChange `json:"change,omitempty"`
}

// TagChange is one changed tag and the fields that changed: address,
// monitoring, subject, writable.
type TagChange struct {
	Tag    string   `json:"tag"`
	Fields []string `json:"fields"`
}

// Empty reports whether p changes nothing.
func (p *Plan) Empty() bool {
	return len(p.Restart)+len(p.AddSources)+len(p.RemoveSources)+len(p.ReplaceSources)+len(p.Tags) == 0
}

// Err returns the refusal of a plan with restart-only changes, naming
// each, or nil.
func (p *Plan) Err() error {
	if len(p.Restart) == 0 {
		return nil
	}
	return fmt.Errorf("config: not applied: these changes need a restart, which applies them: %s", strings.Join(p.Restart, "; "))
}

// Summary is the plan in one line, for the log and the audit line:
// "sources +1 -0 ~0, tags +1000 -1000 ~100".
func (p *Plan) Summary() string {
	var add, rm, ch int
	for _, t := range p.Tags {
		add, rm, ch = add+len(t.Add), rm+len(t.Remove), ch+len(t.Change)
	}
	return fmt.Sprintf("sources +%d -%d ~%d, tags +%d -%d ~%d",
		len(p.AddSources), len(p.RemoveSources), len(p.ReplaceSources), add, rm, ch)
}

// restartOnly are the fields of Config a running relay cannot change:
// its connection, its service subjects, its sink and stream, its fleet,
// and the settings every tag or source was built with. Sources are
// compared apart.
var restartOnly = []struct {
	field string
	get   func(*Config) any
}{
	{"instance", func(c *Config) any { return c.Instance }},
	{"logLevel", func(c *Config) any { return c.LogLevel }},
	{"http.listen", func(c *Config) any { return c.HTTPListen() }},
	{"nats.servers", func(c *Config) any { return c.NATS.Servers }},
	{"nats.name", func(c *Config) any { return c.NATS.Name }},
	{"nats.lameDuckHandling", func(c *Config) any { return c.handling() }},
	{"nats.credentials", func(c *Config) any { return c.NATS.Credentials }},
	{"nats.user", func(c *Config) any { return c.NATS.User }},
	{"nats.password", func(c *Config) any { return c.NATS.Password }},
	{"nats.token", func(c *Config) any { return c.NATS.Token }},
	{"nats.tls", func(c *Config) any { return c.NATS.TLS }},
	{"nats.failOnAuthError", func(c *Config) any { return c.NATS.FailOnAuthError }},
	{"nats.fastCutover", func(c *Config) any { return c.NATS.FastCutover }},
	{"service.prefix", func(c *Config) any { return c.Service.Prefix }},
	{"service.name", func(c *Config) any { return c.Service.Name }},
	{"service.trustRequestInfo", func(c *Config) any { return c.Service.TrustRequestInfo }},
	{"subject", func(c *Config) any { return c.Subject }},
	{"noHeaders", func(c *Config) any { return c.NoHeaders }},
	{"subscribe", func(c *Config) any { return c.guard() }},
	{"sink", func(c *Config) any { return c.Sink == SinkJetStream }},
	{"jetstream", func(c *Config) any { return c.JetStream }},
	{"fleet", func(c *Config) any { return c.Fleet }},
	{"stateDir", func(c *Config) any { return c.StateDir }},
}

// Diff works out what applying next to a relay running cur changes. Both
// must be valid configs. It is a pure function of the two: the plan names
// restart-only changes (Plan.Restart) beside the live ones, and Apply
// refuses a plan that has any.
func Diff(cur, next *Config) *Plan { return diff(cur, next, false) }

// restartFields names each restart-only field (restartOnly) that differs
// between cur and next.
func restartFields(cur, next *Config) []string {
	var out []string
	for _, f := range restartOnly {
		if !reflect.DeepEqual(f.get(cur), f.get(next)) {
			out = append(out, f.field+": changed; a restart applies it")
		}
	}
	return out
}

// diff is Diff; fleetVersion is true for a fleet's config version
// (docs/fleet.md#config-versions), which may change the tags of a fleet
// relay's sources but not its source list.
func diff(cur, next *Config, fleetVersion bool) *Plan {
	p := &Plan{Restart: restartFields(cur, next)}
	old := map[string]SourceConfig{}
	for _, s := range cur.Sources {
		old[s.Name] = s
	}
	kept := map[string]bool{}
	for i, s := range next.Sources {
		f := fmt.Sprintf("sources[%d] (%s)", i, s.Name)
		o, ok := old[s.Name]
		if !ok {
			if len(s.Browse) > 0 {
				p.Restart = append(p.Restart, f+": a source with browse roots is added by a restart")
				continue
			}
			p.AddSources = append(p.AddSources, s.Name)
			continue
		}
		kept[s.Name] = true
		if reflect.DeepEqual(o, s) {
			continue
		}
		if len(o.Browse) > 0 || len(s.Browse) > 0 {
			p.Restart = append(p.Restart, f+": a source with browse roots changes by a restart (its browsed tags are found at start)")
			continue
		}
		if !sameSettings(o, s) {
			p.ReplaceSources = append(p.ReplaceSources, s.Name)
			continue
		}
		if tp := diffTags(o, s); tp != nil {
			p.Tags = append(p.Tags, *tp)
		}
	}
	for _, s := range cur.Sources {
		if kept[s.Name] {
			continue
		}
		if len(s.Browse) > 0 {
			p.Restart = append(p.Restart, fmt.Sprintf("source %s: a source with browse roots is removed by a restart", s.Name))
			continue
		}
		p.RemoveSources = append(p.RemoveSources, s.Name)
	}
	if cur.Fleet == nil {
		return p
	}
	// Every relay of a fleet must run the same sources and tags: one
	// relay's file cannot change them, the fleet's version does. A
	// source that starts or stops would change the leases every relay
	// divides; a version changes that as each relay starts.
	sources := len(p.AddSources) + len(p.RemoveSources) + len(p.ReplaceSources)
	switch {
	case !fleetVersion && sources+len(p.Tags) > 0:
		p.Restart = append(p.Restart, "sources: a fleet relay's sources and tags change with the fleet's config version (apbridge fleet apply), or by a restart of every relay of the fleet")
	case fleetVersion && sources > 0:
		p.Restart = append(p.Restart, "sources: a fleet's sources are added, removed and replaced by a restart of its relays (each runs the fleet's version when it starts); only tags change live")
	}
	return p
}

// sameSettings reports whether two versions of a source have the same
// settings but for their tags: the same session serves both.
func sameSettings(a, b SourceConfig) bool {
	a.Tags, a.Groups, a.MxGateway.Tags = nil, nil, nil
	b.Tags, b.Groups, b.MxGateway.Tags = nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// effectiveTag is a tag as its source subscribes it.
type effectiveTag struct {
	cfg bridge.TagConfig
	mon opcuasource.Monitoring
}

// effectiveTags returns a source's tags by name, in order.
func (s SourceConfig) effectiveTags() ([]string, map[string]effectiveTag) {
	if s.Type == TypeMxGateway {
		// Sized once: a change diffs sources of 10,000 tags.
		out := make(map[string]effectiveTag, len(s.MxGateway.Tags))
		order := make([]string, 0, len(s.MxGateway.Tags))
		for _, t := range s.MxGateway.Tags {
			out[t.Name] = effectiveTag{cfg: t}
			order = append(order, t.Name)
		}
		return order, out
	}
	listed := s.listedTags("")
	out := make(map[string]effectiveTag, len(listed))
	order := make([]string, 0, len(listed))
	for _, e := range listed {
		out[e.tag.Name] = effectiveTag{cfg: e.tag.TagConfig, mon: e.mon}
		order = append(order, e.tag.Name)
	}
	return order, out
}

// diffTags compares the tags of two versions of a source with the same
// settings; nil when they are the same.
func diffTags(o, s SourceConfig) *SourceTagPlan {
	tp := &SourceTagPlan{Source: s.Name}
	oldOrder, was := o.effectiveTags()
	order, now := s.effectiveTags()
	for _, name := range order {
		t := now[name]
		w, ok := was[name]
		if !ok {
			tp.Add = append(tp.Add, name)
			continue
		}
		var fields []string
		if w.cfg.Address != t.cfg.Address {
			fields = append(fields, "address")
		}
		// The same pointers (as a rule none: no override) are the same
		// settings, without reflect's boxing of 10,000 pairs.
		if w.mon != t.mon && !reflect.DeepEqual(w.mon, t.mon) {
			fields = append(fields, "monitoring")
		}
		if w.cfg.Subject != t.cfg.Subject {
			fields = append(fields, "subject")
		}
		if w.cfg.Writable != t.cfg.Writable {
			fields = append(fields, "writable")
		}
		if len(fields) > 0 {
			tp.Change = append(tp.Change, TagChange{Tag: name, Fields: fields})
		}
	}
	for _, name := range oldOrder {
		if _, ok := now[name]; !ok {
			tp.Remove = append(tp.Remove, name)
		}
	}
	if len(tp.Add)+len(tp.Remove)+len(tp.Change) == 0 {
		return nil
	}
	return tp
}

// resubscribes reports whether a tag change needs a new item at the
// source: its address or its monitoring changed.
func (c TagChange) resubscribes() bool {
	return slices.Contains(c.Fields, "address") || slices.Contains(c.Fields, "monitoring")
}
