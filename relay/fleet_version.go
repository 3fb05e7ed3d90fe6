package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apbridge/apbridge/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A fleet's config versions (docs/fleet.md#config-versions): the fleet's
// config file lives in its config bucket (fleet.ConfigBucket), written by
// `apbridge fleet apply` (FleetApply); the key's revision is the version.
// Every relay of the fleet runs the version: a relay that starts while
// one is written builds its sources from it (its own file is then the
// bootstrap: NATS, the fleet settings and whatever else only a restart
// changes, which must match), and a running relay applies each new one
// live (Apply, Origin ViaFleet), all or nothing, and reports the outcome
// in the bucket (fleet.AppliedVersion), which `apbridge fleet status`
// shows.

// ViaFleet is Origin.Via of a fleet's config version.
const ViaFleet = "fleet"

// versionPoll is how often a relay reads the version key besides
// watching it: a watcher whose consumer sat on a node that died can go
// silent, and a version must not wait for the next one to be applied.
const versionPoll = 10 * time.Second

// versionReportTimeout bounds a report of the applied version.
const versionReportTimeout = 5 * time.Second

// versionFollower is a fleet relay's part in the fleet's config versions.
type versionFollower struct {
	kv jetstream.KeyValue
	id string

	mu sync.Mutex
	// state is what the relay reports: the version it runs (0: its
	// file), the latest it tried and why that failed.
	state fleet.AppliedVersion

	cancel context.CancelFunc
	done   chan struct{}
}

// ownRelayID sets next's fleet.relayId to the running config's: a fleet's
// version is one text for every relay, each of which keeps its own ID.
func ownRelayID(next, cur *Config) {
	if next.Fleet != nil && cur.Fleet != nil && next.Fleet.RelayID != cur.Fleet.RelayID {
		f := *next.Fleet
		f.RelayID = cur.Fleet.RelayID
		next.Fleet = &f
	}
}

// startVersion opens the fleet's config bucket and returns the config the
// relay starts with: the fleet's version when one is written and only
// differs from the file c in what runs live (sources and tags), and c
// otherwise (the reason is reported and logged).
func (r *Relay) startVersion(ctx context.Context, c *Config) (*Config, error) {
	v := &r.fl.versions
	v.id = c.Fleet.RelayID
	js, err := jetstream.New(r.fl.nc)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if v.kv, err = fleet.OpenConfigBucket(ctx, js, c.Fleet.fleetConfig(nil)); err != nil {
		return nil, err
	}
	data, rev, ok, err := fleet.ReadVersion(ctx, v.kv)
	if err != nil || !ok {
		return c, err
	}
	next, err := Parse(data)
	if err == nil {
		ownRelayID(next, c)
		if rs := restartFields(c, next); len(rs) > 0 {
			err = fmt.Errorf("config: fleet version %d not run: it differs from this relay's file in what only the file sets: %s", rev, strings.Join(rs, "; "))
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.state.Tried = rev
	if err != nil {
		v.state.Error = errorLine(next, err)
		r.live.lastErr = v.state.Error
		r.log.Warn().Uint64("version", rev).Err(errors.New(v.state.Error)).Msg("fleet config version not applied; running the config file")
		return c, nil
	}
	v.state.Version = rev
	r.live.cfg, r.live.version = next, rev
	r.log.Info().Uint64("version", rev).Int("sources", len(next.Sources)).Msg("running the fleet's config version")
	return next, nil
}

// errorLine is err in one line, its environment values redacted as c's
// file writes them (c may be nil).
func errorLine(c *Config, err error) string {
	var lines []string
	for _, e := range Errors(err) {
		lines = append(lines, c.redactString(e.Error()))
	}
	return strings.Join(lines, "; ")
}

// follow reports what the relay runs and starts the goroutine that
// applies each new version; stop ends it.
func (v *versionFollower) follow(r *Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel, v.done = cancel, make(chan struct{})
	go func() {
		defer close(v.done)
		v.report(ctx, r)
		v.run(ctx, r)
	}()
}

// stop ends the goroutine and removes the relay's report (it leaves the
// fleet). It is idempotent.
func (v *versionFollower) stop(ctx context.Context) {
	if v.cancel == nil {
		return
	}
	v.cancel()
	<-v.done
	v.cancel = nil
	// Best effort: fleet status shows the reports of live relays only.
	_ = fleet.ForgetApplied(ctx, v.kv, v.id)
}

func (v *versionFollower) run(ctx context.Context, r *Relay) {
	tick := time.NewTicker(versionPoll)
	defer tick.Stop()
	var w jetstream.KeyWatcher
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for {
		var updates <-chan jetstream.KeyValueEntry
		if w == nil {
			var err error
			if w, err = v.kv.Watch(ctx, fleet.VersionKey); err != nil {
				r.log.Warn().Err(err).Msg("fleet: watching the config version failed; retrying")
				w = nil
			}
		}
		if w != nil {
			updates = w.Updates()
		}
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				w = nil
				continue
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				v.apply(ctx, r, e.Value(), e.Revision())
			}
		case <-tick.C:
			data, rev, ok, err := fleet.ReadVersion(ctx, v.kv)
			if err == nil && ok {
				v.apply(ctx, r, data, rev)
			}
		}
	}
}

// apply applies version rev, data, unless it was tried already, and
// reports the outcome.
func (v *versionFollower) apply(ctx context.Context, r *Relay, data []byte, rev uint64) {
	v.mu.Lock()
	tried := v.state.Tried
	v.mu.Unlock()
	if rev <= tried {
		return
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	a, err := r.ApplyYAML(actx, data, Origin{Via: ViaFleet}, rev)
	cancel()
	v.mu.Lock()
	v.state.Tried, v.state.Error = rev, ""
	if err != nil {
		v.state.Error = errorLine(a.cfg, err)
	} else {
		v.state.Version = rev
	}
	v.mu.Unlock()
	v.report(ctx, r)
}

// report writes the relay's state to the bucket.
func (v *versionFollower) report(ctx context.Context, r *Relay) {
	v.mu.Lock()
	st := v.state
	v.mu.Unlock()
	st.At = time.Now().UTC()
	rctx, cancel := context.WithTimeout(ctx, versionReportTimeout)
	defer cancel()
	if err := fleet.ReportApplied(rctx, v.kv, v.id, st); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Uint64("version", st.Tried).Msg("fleet: reporting the applied config version failed")
	}
}

// FleetVersion returns what a fleet relay reports of the fleet's config
// versions: the version it runs (0: its own file), the latest it tried
// and why that failed; ok is false when the relay is not in a fleet.
func (r *Relay) FleetVersion() (a fleet.AppliedVersion, ok bool) {
	if r.fl == nil {
		return fleet.AppliedVersion{}, false
	}
	v := &r.fl.versions
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state, true
}

// FleetApplied is the outcome of FleetApply.
type FleetApplied struct {
	// Version is the fleet's config version after the call.
	Version uint64 `json:"version"`
	// Previous is the version before it, 0 when none was written.
	Previous uint64 `json:"previous,omitempty"`
	// Against is the version the new one was checked against: the newest
	// a relay runs (fleet.RunningVersion), 0 for the first version.
	Against uint64 `json:"against,omitempty"`
	// Plan is what the new version changes against that one (nil for the
	// first version).
	Plan *Plan `json:"plan,omitempty"`
	// Unchanged is true when the config is the current version's: no
	// version was written.
	Unchanged bool `json:"unchanged,omitempty"`
}

// FleetApply makes data, a config file's text, the fleet's next config
// version (`apbridge fleet apply`): it is validated completely (every
// problem listed, as `apbridge validate` does, in this process's
// environment), diffed against the version the relays run
// (fleet.RunningVersion), refused when the
// diff holds a change that cannot be applied live (each named), and
// written to the fleet's config bucket, reached as the file's nats and
// fleet sections say. The text is stored as written, so that each relay
// expands its environment references (${RELAY_ID}, secrets) with its own
// environment. Every relay of the fleet then applies it.
func FleetApply(ctx context.Context, data []byte) (FleetApplied, error) {
	next, err := Parse(data)
	if err != nil {
		return FleetApplied{}, err
	}
	if next.Fleet == nil {
		return FleetApplied{}, errors.New("fleet apply: the config has no fleet section: a fleet's version names its bucket there")
	}
	opts, err := next.natsOptions()
	if err != nil {
		return FleetApplied{}, err
	}
	nc, err := nats.Connect(strings.Join(next.NATS.Servers, ","), append(opts, nats.Name(next.connName()+"-apply"))...)
	if err != nil {
		return FleetApplied{}, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return FleetApplied{}, err
	}
	kv, err := fleet.OpenConfigBucket(ctx, js, next.Fleet.fleetConfig(nil))
	if err != nil {
		return FleetApplied{}, err
	}
	_, prev, _, err := fleet.ReadVersion(ctx, kv)
	if err != nil {
		return FleetApplied{}, err
	}
	cur, against, ok, err := fleet.RunningVersion(ctx, kv)
	if err != nil {
		return FleetApplied{}, err
	}
	out := FleetApplied{Version: prev, Previous: prev, Against: against}
	if ok {
		// A current version that no longer parses here (another
		// environment wrote it) is not compared: the relays refuse what
		// they cannot apply and report it.
		if was, perr := Parse(cur); perr == nil {
			out.Plan = next.redactPlan(diff(was, next, true))
			if err := out.Plan.Err(); err != nil {
				return out, fmt.Errorf("fleet apply: against version %d, which the relays run: %w", against, err)
			}
			if out.Plan.Empty() && against == prev {
				out.Unchanged = true
				return out, nil
			}
		}
	}
	if out.Version, err = fleet.WriteVersion(ctx, kv, data, prev); err != nil {
		return out, err
	}
	return out, nil
}

// rebuildLeased makes fleet relay source i build its next instances from
// sc: a version changed its tags, and an OPC UA instance is built with
// their monitoring. undo gets what sets it back. Nothing for a relay
// outside a fleet, whose sources are built once.
func (r *Relay) rebuildLeased(i int, sc SourceConfig, undo *[]func()) error {
	if r.fl == nil {
		return nil
	}
	ls := r.fl.leased[sc.Name]
	if ls == nil {
		return nil
	}
	f, _, err := r.sourceFactory(i, sc)
	if err != nil {
		return err
	}
	prev := ls.setBuild(f)
	*undo = append(*undo, func() { ls.setBuild(prev) })
	return nil
}
