package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apbridge/apbridge/bridge"
)

// liveConfig is the relay's running config and its version.
type liveConfig struct {
	// mu makes changes one at a time and guards the fields.
	mu      sync.Mutex
	cfg     *Config
	version uint64
	// extras counts the sources given in code (WithSource,
	// WithSourceFactory): a config beside them needs none of its own.
	extras int
	// lastErr is why the last change was not applied, "" after one was.
	lastErr string
}

// Origin is who asked for a config change, for the audit line: how it
// came (Via: "sighup", "service", "service control" for a Windows
// service's parameter change, "fleet", "file") and, from the
// service, who sent the request.
type Origin struct {
	Via string
	// Requester is the service request's sender (bridge.RequesterOf);
	// the zero value names nobody.
	Requester bridge.Requester
}

// Applied is the outcome of Apply.
type Applied struct {
	// Version is the relay's config version after the call: one more
	// than before when the config changed, or the version a caller gave
	// (WithVersion of ApplyOptions).
	Version uint64 `json:"version"`
	// Plan is what was applied.
	Plan *Plan `json:"plan"`
	// Problems are what did not reach a source although the change was
	// made (bridge.ChangeResult.Problems).
	Problems []string `json:"problems,omitempty"`

	// cfg is the config applied or refused, for redaction.
	cfg *Config
}

// redactedPlan is the plan with the values that came from the
// environment shown as the file writes them.
func (a Applied) redactedPlan() *Plan { return a.cfg.redactPlan(a.Plan) }

// redact is s with the values that came from the environment shown as
// the file writes them.
func (a Applied) redact(s string) string { return a.cfg.redactString(s) }

// Config returns the running config and its version: 1 for the config
// the relay started with, one more for each change applied (in a fleet,
// the bucket's revision of the config applied, when one was).
func (r *Relay) Config() (*Config, uint64) {
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	return r.live.cfg, r.live.version
}

// ConfigError is why the last config change was not applied, or "" when
// the last one was (or none came).
func (r *Relay) ConfigError() string {
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	return r.live.lastErr
}

// Check validates next completely and returns the plan applying it would
// make, without applying it (a dry run). A config with problems returns
// every one of them (Errors splits them); a plan with restart-only changes
// is returned with its refusal as the error.
func (r *Relay) Check(next *Config) (*Plan, error) {
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	return r.checkLocked(next, false, false)
}

// checkLocked validates next, unless it was just parsed (validated), and
// diffs it: as a fleet's config version when fleetVersion, whose
// fleet.relayId is this relay's own (every relay reads one text).
func (r *Relay) checkLocked(next *Config, validated, fleetVersion bool) (*Plan, error) {
	if next == nil {
		return nil, errors.New("config: none given")
	}
	if !validated || r.live.extras > 0 {
		if err := next.validate(r.live.extras > 0); err != nil {
			return nil, err
		}
	}
	if fleetVersion {
		ownRelayID(next, r.live.cfg)
	}
	p := diff(r.live.cfg, next, fleetVersion)
	return p, p.Err()
}

// Apply makes next the running config, live: it is validated completely
// and diffed against the running one (Check), and a config with any
// problem or any restart-only change changes nothing. Otherwise added
// tags are subscribed, removed ones deleted at their server, changed ones
// moved, and added, removed and replaced sources start and stop alone;
// tags and sources the change does not name see nothing of it. Each change
// applied is logged once ("config applied") with who asked, the version
// and a summary of the plan. version, when not 0, is the version to
// record (a fleet's bucket revision); 0 counts one up.
func (r *Relay) Apply(ctx context.Context, next *Config, by Origin, version uint64) (Applied, error) {
	return r.apply(ctx, next, by, version, false)
}

// ApplyYAML is Apply of a config file's text, parsed as Parse does (the
// file is validated once, not twice): SIGHUP's and the config service's
// way. A text that does not parse is refused with every problem, and
// logged as a refusal.
func (r *Relay) ApplyYAML(ctx context.Context, data []byte, by Origin, version uint64) (Applied, error) {
	next, err := Parse(data)
	if err != nil {
		r.live.mu.Lock()
		defer r.live.mu.Unlock()
		r.refusedLocked(by, err)
		return Applied{Version: r.live.version}, err
	}
	return r.apply(ctx, next, by, version, true)
}

func (r *Relay) apply(ctx context.Context, next *Config, by Origin, version uint64, validated bool) (Applied, error) {
	r.live.mu.Lock()
	defer r.live.mu.Unlock()
	p, err := r.checkLocked(next, validated, by.Via == ViaFleet)
	if err != nil {
		r.refusedLocked(by, err)
		return Applied{Version: r.live.version, Plan: p, cfg: next}, err
	}
	if p.Empty() {
		if version != 0 {
			r.live.version = version
		}
		r.live.cfg, r.live.lastErr = next, ""
		return Applied{Version: r.live.version, Plan: p, cfg: next}, nil
	}
	ch, built, restore, err := r.change(next, p)
	if err == nil {
		var res bridge.ChangeResult
		res, err = r.b.Apply(ctx, ch)
		if err == nil {
			if version == 0 {
				version = r.live.version + 1
			}
			r.live.cfg, r.live.version, r.live.lastErr = next, version, ""
			e := r.log.Info().Str("via", by.Via)
			if len(res.Problems) > 0 {
				// The change is applied, but a removal has not reached its
				// source yet (it goes on) or did not: said here, not only
				// in the reply, so that the log alone tells the operator.
				e = e.Strs("pending", res.Problems)
			}
			by.Requester.LogTo(e).Uint64("version", version).Str("summary", p.Summary()).Msg("config applied")
			return Applied{Version: version, Plan: p, Problems: res.Problems, cfg: next}, nil
		}
	}
	restore()
	for _, src := range built {
		src.Close()
	}
	r.refusedLocked(by, err)
	return Applied{Version: r.live.version, Plan: p, cfg: next}, err
}

// refusedLocked records and logs, once, why a change by was not applied;
// r.live.mu is held.
func (r *Relay) refusedLocked(by Origin, err error) {
	r.live.lastErr = err.Error()
	e := r.log.Warn().Str("via", by.Via)
	by.Requester.LogTo(e).Uint64("version", r.live.version).Int("problems", len(Errors(err))).Err(err).Msg("config not applied")
}

// change turns a plan into the bridge's change: the sources it adds are
// built (not started), and the monitoring of the OPC UA sources whose tags
// change is set to the new config's; restore sets it back, for a change
// the bridge refuses.
func (r *Relay) change(next *Config, p *Plan) (ch bridge.Change, built []bridge.Source, restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, f := range undo {
			f()
		}
	}
	index := map[string]int{}
	for i, s := range next.Sources {
		index[s.Name] = i
	}
	ch.RemoveSources = append(append(ch.RemoveSources, p.RemoveSources...), p.ReplaceSources...)
	for _, name := range p.RemoveSources {
		r.builtMu.Lock()
		prev, had := r.built[name]
		delete(r.built, name)
		r.builtMu.Unlock()
		if had {
			undo = append(undo, func() {
				r.builtMu.Lock()
				r.built[name] = prev
				r.builtMu.Unlock()
			})
		}
	}
	for _, name := range append(append([]string(nil), p.AddSources...), p.ReplaceSources...) {
		i := index[name]
		r.builtMu.Lock()
		prev, had := r.built[name]
		r.builtMu.Unlock()
		undo = append(undo, func() {
			r.builtMu.Lock()
			defer r.builtMu.Unlock()
			if had {
				r.built[name] = prev
			} else {
				delete(r.built, name)
			}
		})
		f, tags, ferr := r.sourceFactory(i, next.Sources[i])
		if ferr != nil {
			return ch, built, restore, ferr
		}
		src, ferr := f()
		if ferr != nil {
			return ch, built, restore, ferr
		}
		built = append(built, src)
		ch.AddSources = append(ch.AddSources, bridge.NewSource{Source: src, Tags: tags})
	}
	for _, tp := range p.Tags {
		sc := next.Sources[index[tp.Source]]
		_, tags := sc.effectiveTags()
		tc := bridge.TagChanges{Source: tp.Source, Remove: tp.Remove}
		for _, name := range tp.Add {
			tc.Add = append(tc.Add, tags[name].cfg)
		}
		for _, c := range tp.Change {
			tc.Change = append(tc.Change, bridge.TagUpdate{Config: tags[c.Tag].cfg, Resubscribe: c.resubscribes()})
		}
		ch.Tags = append(ch.Tags, tc)
		if err := r.rebuildLeased(index[tp.Source], sc, &undo); err != nil {
			return ch, built, restore, err
		}
		if sc.Type == TypeMxGateway {
			continue
		}
		r.builtMu.Lock()
		src := r.built[tp.Source]
		r.builtMu.Unlock()
		if src == nil {
			continue
		}
		_, mon := sc.tagsAndMonitoring()
		_, old := r.live.cfg.Sources[r.indexOf(tp.Source)].tagsAndMonitoring()
		if err := src.SetMonitoring(mon); err != nil {
			return ch, built, restore, fmt.Errorf("source %q: %w", tp.Source, err)
		}
		undo = append(undo, func() { src.SetMonitoring(old) })
	}
	return ch, built, restore, nil
}

// indexOf returns the index of the running config's source name.
func (r *Relay) indexOf(name string) int {
	for i, s := range r.live.cfg.Sources {
		if s.Name == name {
			return i
		}
	}
	return -1
}
