package relay

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"gopkg.in/yaml.v3"
)

// ConfigReply is what the config service answers, in JSON, on every
// operation (wire.ConfigSubject).
type ConfigReply struct {
	// OK is false when the config was refused (validate, diff, apply) or
	// the request was malformed; Errors lists every problem then.
	OK bool `json:"ok"`
	// Version is the relay's applied config version after the request.
	Version uint64 `json:"version"`
	// Plan is what the config changes (diff) or changed (apply).
	Plan *Plan `json:"plan,omitempty"`
	// Errors are the problems, one each.
	Errors []string `json:"errors,omitempty"`
	// Problems are what did not reach a source of an applied change.
	Problems []string `json:"problems,omitempty"`
	// Config is the running config (get), its secrets redacted.
	Config any `json:"config,omitempty"`
	// LastError is why the last change was not applied (get).
	LastError string `json:"lastError,omitempty"`
	// Fleet is, on a fleet relay, the fleet's config version it runs
	// (0: its own file), the latest it tried and why that failed (get).
	Fleet *fleet.AppliedVersion `json:"fleet,omitempty"`
}

// applyTimeout bounds a change applied through the service: deleting
// the removed items at a server, stopping removed sources.
const applyTimeout = 30 * time.Second

// configEndpoints are the config service's endpoints on prefix.
func (r *Relay) configEndpoints(prefix string, trusted bool) []bridge.Endpoint {
	ep := func(op string, h func(req micro.Request) ConfigReply) bridge.Endpoint {
		return bridge.Endpoint{Name: "config-" + op, Subject: wire.ConfigSubject(prefix, op), Handler: func(req micro.Request) {
			rep := h(req)
			data, err := json.Marshal(rep)
			if err != nil {
				req.Error("500", err.Error(), nil)
				return
			}
			if err := req.Respond(data); err != nil {
				r.log.Warn().Err(err).Str("endpoint", "config-"+op).Int("bytes", len(data)).Msg("reply not sent")
			}
		}}
	}
	proposed := func(req micro.Request) (*Config, *ConfigReply) {
		c, err := Parse(req.Data())
		if err != nil {
			_, v := r.Config()
			rep := &ConfigReply{Version: v}
			for _, e := range Errors(err) {
				rep.Errors = append(rep.Errors, e.Error())
			}
			return nil, rep
		}
		return c, nil
	}
	check := func(req micro.Request) ConfigReply {
		c, bad := proposed(req)
		if bad != nil {
			return *bad
		}
		p, err := r.Check(c)
		_, v := r.Config()
		rep := ConfigReply{OK: err == nil, Version: v, Plan: c.redactPlan(p)}
		for _, e := range Errors(err) {
			rep.Errors = append(rep.Errors, c.redactString(e.Error()))
		}
		return rep
	}
	return []bridge.Endpoint{
		ep("get", func(micro.Request) ConfigReply {
			c, v := r.Config()
			red, err := c.Redacted()
			if err != nil {
				return ConfigReply{Version: v, Errors: []string{err.Error()}}
			}
			rep := ConfigReply{OK: true, Version: v, Config: red, LastError: r.ConfigError()}
			if fv, ok := r.FleetVersion(); ok {
				rep.Fleet = &fv
			}
			return rep
		}),
		ep("validate", func(req micro.Request) ConfigReply {
			rep := check(req)
			rep.Plan = nil
			return rep
		}),
		ep("diff", check),
		everyone(ep("apply", func(req micro.Request) ConfigReply {
			who := bridge.RequesterOf(nats.Header(req.Headers()), trusted)
			ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
			defer cancel()
			a, err := r.ApplyYAML(ctx, req.Data(), Origin{Via: "service", Requester: who}, 0)
			rep := ConfigReply{OK: err == nil, Version: a.Version, Plan: a.redactedPlan(), Problems: a.Problems}
			for _, e := range Errors(err) {
				rep.Errors = append(rep.Errors, a.redact(e.Error()))
			}
			return rep
		})),
	}
}

// everyone makes e reach every replica of the relay (relays that share
// its prefix): each applies the config; the requester reads the first
// reply.
func everyone(e bridge.Endpoint) bridge.Endpoint {
	e.Everyone = true
	return e
}

// Redacted returns c as the config service shows it: its fields by their
// YAML names, every password and token replaced by "[redacted]", and
// every value that came from the environment shown as the file writes it
// (${NAME}), never as its value.
func (c *Config) Redacted() (any, error) {
	data, err := yaml.Marshal(c)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return c.redactValue(v), nil
}

// secretKeys are the config's fields that hold secrets.
var secretKeys = map[string]bool{"password": true, "token": true}

func (c *Config) redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && secretKeys[k] && s != "" {
				x[k] = "[redacted]"
				continue
			}
			x[k] = c.redactValue(e)
		}
	case []any:
		for i, e := range x {
			x[i] = c.redactValue(e)
		}
	case string:
		return c.redactString(x)
	}
	return v
}

// redactString shows every value of s that came from the environment as
// the file writes it.
func (c *Config) redactString(s string) string {
	if c == nil {
		return s
	}
	for _, sub := range c.subs {
		if sub.value != "" {
			s = strings.ReplaceAll(s, sub.value, sub.raw)
		}
	}
	return s
}

// redactPlan is p with every name redacted (redactString): a tag or
// source name may come from the environment.
func (c *Config) redactPlan(p *Plan) *Plan {
	if p == nil || c == nil || len(c.subs) == 0 {
		return p
	}
	data, err := json.Marshal(p)
	if err != nil {
		return p
	}
	var out Plan
	if json.Unmarshal([]byte(c.redactString(string(data))), &out) != nil {
		return &Plan{Restart: []string{"(the plan names values from the environment)"}}
	}
	return &out
}

// MarshalYAML writes a source in the form UnmarshalYAML reads: a type:
// mxgateway source with its gateway settings at its own level.
func (s SourceConfig) MarshalYAML() (any, error) {
	if s.Type == TypeMxGateway {
		return mxGatewaySourceYAML{Name: s.Name, Type: s.Type, MxGatewayConfig: s.MxGateway}, nil
	}
	return opcuaSourceYAML(s), nil
}
