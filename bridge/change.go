package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Change is a change of a running bridge's sources and tags, which Apply
// makes all at once or not at all. Sources and tags it does not name see
// nothing of it: no new subscription, no refresh, and their sequence
// numbers go on.
type Change struct {
	// RemoveSources names sources to stop and remove with their tags.
	RemoveSources []string
	// AddSources are sources to add and start, with their tags. One may
	// take the name of a source in RemoveSources: the source is replaced.
	AddSources []NewSource
	// Tags are the tag changes of sources that stay.
	Tags []TagChanges
}

// NewSource is a source Apply adds, as AddSource would.
type NewSource struct {
	Source  Source
	Tags    []TagConfig
	Options []SourceOption
}

// TagChanges are the changes of one source's tags.
type TagChanges struct {
	// Source names the source.
	Source string
	// Add are new tags, subscribed through the source's guard.
	Add []TagConfig
	// Remove names tags to remove: they are deleted at the source and
	// their last values leave the snapshot.
	Remove []string
	// Change gives tags, by name, a new config.
	Change []TagUpdate
}

// TagUpdate is a tag's new config; the tag is found by Config.Name.
type TagUpdate struct {
	Config TagConfig
	// Resubscribe makes the source subscribe the tag again as a new item:
	// a setting the source keeps of its own changed (an OPC UA tag's
	// monitoring). A changed address is always subscribed again; a
	// changed subject or writable flag never needs it.
	Resubscribe bool
}

// ChangeResult is what Apply could not do at the sources once the change
// was made: the bridge's own state is the new one either way.
type ChangeResult struct {
	// Problems are the removals that did not reach a source (the items
	// may stay at the server until its next session), or had not when
	// Apply's ctx ended (they go on, and a failure is logged), one line
	// each.
	// Tags that cannot be subscribed are reported per tag, as at start:
	// by the guard's log lines and Stats' FailedTags.
	Problems []string
}

// Apply makes c: every source, tag and subject is checked first, and a
// Binder sink asked whether it takes the new subjects; an error lists
// every problem and changes nothing. Then removed sources stop and are
// closed, removed and moved tags are deleted at their source (no update
// of them is published after Apply returns; Apply waits for the deletion
// until ctx ends, and one still running then goes on and is reported in
// Problems), and added and moved tags are subscribed through their
// source's guard, which Apply does not wait for.
// A moved tag keeps its sequence numbers. Each source touched gets an
// event on <prefix>.events.<source>: source-added, source-removed, or
// tags-changed with the names added, removed and changed. Changes are
// applied one at a time.
func (b *Bridge) Apply(ctx context.Context, c Change) (ChangeResult, error) {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	b.mu.Lock()
	if !b.started || b.closed {
		b.mu.Unlock()
		return ChangeResult{}, errors.New("bridge: Apply before Start or after Close")
	}
	p, err := b.planLocked(c)
	if err != nil {
		b.mu.Unlock()
		return ChangeResult{}, err
	}
	if bs, ok := b.sink.(Binder); ok {
		if err := bs.Bind(ctx, b.subjectsAfter(p)); err != nil {
			b.mu.Unlock()
			return ChangeResult{}, err
		}
	}
	b.commitLocked(p)
	// The removals at the sources may outlast Apply (its ctx): they are
	// the bridge's goroutines then, which Close waits for. Counted under
	// b.mu, before Close can be waiting.
	removals := 0
	for _, rp := range p.runners {
		if len(rp.unsubscribe) > 0 {
			removals++
		}
	}
	b.wg.Add(removals)
	b.mu.Unlock()

	var res ChangeResult
	for _, r := range p.removed {
		b.stopRunner(ctx, r)
		b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "source-removed"})
	}
	removed := make(chan string, removals) // a problem, or "" for a removal done
	for _, rp := range p.runners {
		name := rp.r.src.Name()
		if len(rp.unsubscribe) > 0 {
			// With tags to add too, the additions go to the source first
			// (the removals hold nothing up: the bridge publishes nothing
			// of the removed tags from now on), so that a source serving
			// one request at a time (an OPC UA Pair's item worker, a
			// gateway's) gives the added tags their first values without
			// deleting the removed ones first.
			var first <-chan struct{}
			if rp.subscribe {
				first = rp.r.nextSubscribe()
			}
			go func() {
				defer b.wg.Done()
				removed <- b.removeTags(rp.r, rp.unsubscribe, first)
			}()
		}
		if rp.subscribe {
			rp.r.want()
		}
		ev := map[string]any{"source": name, "event": "tags-changed"}
		for k, v := range map[string][]string{"added": rp.addedNames, "removed": rp.removedNames, "changed": rp.changedNames} {
			if len(v) > 0 {
				ev[k] = v
			}
		}
		b.publishEvent(name, ev)
	}
	// Apply waits for the removals as long as ctx lets it: a source busy
	// with a subscribe (a wedged gateway in a subscribe storm holds one
	// for its whole command timeout) must not hold the change, and every
	// later one, for that long.
	for pending := removals; pending > 0; pending-- {
		select {
		case problem := <-removed:
			if problem != "" {
				res.Problems = append(res.Problems, problem)
			}
		case <-ctx.Done():
			res.Problems = append(res.Problems, fmt.Sprintf("%d of the sources have not removed their tags yet (%v): the removal goes on, and a failure is logged", pending, ctx.Err()))
			pending = 0
		}
	}
	for _, r := range p.added {
		b.publishEvent(r.src.Name(), map[string]any{"source": r.src.Name(), "event": "source-added"})
	}
	return res, nil
}

// applyPlan is a checked Change, ready to commit.
type applyPlan struct {
	removed []*runner
	added   []*runner
	addTags map[*runner][]*tagState
	runners []*runnerPlan
}

// runnerPlan is what a change does to a source that stays.
type runnerPlan struct {
	r       *runner
	remove  []*tagState
	replace []tagReplace
	add     []*tagState
	nextHdl uint32

	// Filled by commitLocked.
	unsubscribe                            []Tag
	subscribe                              bool
	addedNames, removedNames, changedNames []string
}

type tagReplace struct {
	old   *tagState
	cfg   TagConfig
	subj  string
	resub bool
	hdl   uint32
}

// planLocked checks c against the bridge as it is; b.mu is held.
func (b *Bridge) planLocked(c Change) (*applyPlan, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("bridge: "+format, a...)) }
	byName := map[string]*runner{}
	for _, r := range b.sources {
		byName[r.src.Name()] = r
	}
	p := &applyPlan{addTags: map[*runner][]*tagState{}}
	chk := b.newSubjectCheck(0)
	gone := map[string]bool{}
	for _, name := range c.RemoveSources {
		r := byName[name]
		switch {
		case r == nil:
			bad("remove source %q: no such source", name)
			continue
		case gone[name]:
			bad("remove source %q: named twice", name)
			continue
		}
		gone[name] = true
		p.removed = append(p.removed, r)
		r.mu.Lock()
		for _, ts := range r.tags {
			chk.free(ts.subject)
		}
		r.mu.Unlock()
	}
	// Frees first, takes after: a tag may take a subject another tag of
	// the change gives up.
	changed := map[string]bool{}
	for _, tc := range c.Tags {
		r := byName[tc.Source]
		switch {
		case r == nil:
			bad("change tags of source %q: no such source", tc.Source)
			continue
		case gone[tc.Source]:
			bad("change tags of source %q: the change removes it", tc.Source)
			continue
		case changed[tc.Source]:
			bad("change tags of source %q: named twice", tc.Source)
			continue
		}
		changed[tc.Source] = true
		rp := &runnerPlan{r: r}
		r.mu.Lock()
		byTag := make(map[string]*tagState, len(r.tags))
		for _, ts := range r.tags {
			byTag[ts.cfg.Name] = ts
		}
		rp.nextHdl = r.nextHandle
		r.mu.Unlock()
		touched := map[string]bool{}
		for _, name := range tc.Remove {
			ts := byTag[name]
			switch {
			case ts == nil:
				bad("source %q: remove tag %q: no such tag", tc.Source, name)
				continue
			case touched[name]:
				bad("source %q: tag %q: named twice in the change", tc.Source, name)
				continue
			}
			touched[name] = true
			rp.remove = append(rp.remove, ts)
			chk.free(ts.subject)
		}
		for _, u := range tc.Change {
			ts := byTag[u.Config.Name]
			switch {
			case ts == nil:
				bad("source %q: change tag %q: no such tag", tc.Source, u.Config.Name)
				continue
			case touched[u.Config.Name]:
				bad("source %q: tag %q: named twice in the change", tc.Source, u.Config.Name)
				continue
			}
			touched[u.Config.Name] = true
			rp.replace = append(rp.replace, tagReplace{old: ts, cfg: u.Config,
				resub: u.Resubscribe || u.Config.Address != ts.cfg.Address})
			chk.free(ts.subject)
		}
		for i, t := range tc.Add {
			switch {
			case t.Name == "":
				bad("source %q: add tags[%d]: name is empty", tc.Source, i)
			case touched[t.Name]:
				bad("source %q: tag %q: named twice in the change", tc.Source, t.Name)
			case byTag[t.Name] != nil:
				bad("source %q: add tag %q: the source has it already", tc.Source, t.Name)
			}
			touched[t.Name] = true
		}
		p.runners = append(p.runners, rp)
	}
	for _, ns := range c.AddSources {
		switch name := ns.Source.Name(); {
		case byName[name] != nil && !gone[name]:
			bad("add source %q: the bridge has a source of that name", name)
		case changed[name]:
			bad("add source %q: named twice", name)
		default:
			changed[name] = true
		}
	}
	// Now the subjects taken: those of moved tags, added tags and the
	// added sources' tags.
	for _, rp := range p.runners {
		name := rp.r.src.Name()
		for i := range rp.replace {
			rep := &rp.replace[i]
			subj, err := chk.subject(name, rep.cfg)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rep.subj, rep.hdl = subj, rep.old.handle
			if rep.resub {
				rep.hdl = rp.nextHdl
				rp.nextHdl++
			}
		}
		for _, t := range c.tagsOf(name) {
			if t.Name == "" {
				continue
			}
			subj, err := chk.subject(name, t)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rp.add = append(rp.add, &tagState{cfg: t, src: rp.r, handle: rp.nextHdl, subject: subj})
			rp.nextHdl++
		}
	}
	for _, ns := range c.AddSources {
		r := newRunner(b, ns.Source)
		var so sourceOptions
		for _, opt := range ns.Options {
			opt(&so)
		}
		r.tagsLater = so.tagsLater
		seen := map[string]bool{}
		var tags []*tagState
		for i, t := range ns.Tags {
			if t.Name == "" {
				bad("source %q: tags[%d]: name is empty", ns.Source.Name(), i)
				continue
			}
			if seen[t.Name] {
				bad("source %q: tag %q is listed twice", ns.Source.Name(), t.Name)
				continue
			}
			seen[t.Name] = true
			subj, err := chk.subject(ns.Source.Name(), t)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tags = append(tags, &tagState{cfg: t, src: r, handle: uint32(len(tags)) + 1, subject: subj})
		}
		p.added = append(p.added, r)
		p.addTags[r] = tags
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// tagsOf returns the tags c adds to source.
func (c Change) tagsOf(source string) []TagConfig {
	for _, t := range c.Tags {
		if t.Source == source {
			return t.Add
		}
	}
	return nil
}

// subjectsAfter returns the bridge's subjects as p leaves them, for a
// Binder; b.mu is held.
func (b *Bridge) subjectsAfter(p *applyPlan) Subjects {
	var keep []*runner
	for _, r := range b.sources {
		if !slices.Contains(p.removed, r) {
			keep = append(keep, r)
		}
	}
	s := b.subjects(append(keep, p.added...))
	for r, tags := range p.addTags {
		for _, ts := range tags {
			s.Tags[r.src.Name()] = append(s.Tags[r.src.Name()], ts.subject)
		}
	}
	for _, rp := range p.runners {
		name := rp.r.src.Name()
		drop := map[string]bool{}
		for _, ts := range rp.remove {
			drop[ts.subject] = true
		}
		for _, rep := range rp.replace {
			drop[rep.old.subject] = true
		}
		s.Tags[name] = slices.DeleteFunc(s.Tags[name], func(subj string) bool { return drop[subj] })
		for _, rep := range rp.replace {
			s.Tags[name] = append(s.Tags[name], rep.subj)
		}
		for _, ts := range rp.add {
			s.Tags[name] = append(s.Tags[name], ts.subject)
		}
	}
	return s
}

// commitLocked makes p the bridge's state and starts the added sources;
// b.mu is held.
func (b *Bridge) commitLocked(p *applyPlan) {
	for _, r := range p.removed {
		b.sources = slices.DeleteFunc(b.sources, func(x *runner) bool { return x == r })
		r.mu.Lock()
		for _, ts := range r.tags {
			if b.bySubject[ts.subject] == ts {
				delete(b.bySubject, ts.subject)
			}
		}
		r.mu.Unlock()
	}
	for _, rp := range p.runners {
		r := rp.r
		r.mu.Lock()
		for _, ts := range rp.remove {
			delete(r.byHandle, ts.handle)
			if b.bySubject[ts.subject] == ts {
				delete(b.bySubject, ts.subject)
			}
			rp.unsubscribe = append(rp.unsubscribe, Tag{Name: ts.cfg.Name, Address: ts.cfg.Address, Handle: ts.handle})
			rp.removedNames = append(rp.removedNames, ts.cfg.Name)
		}
		gone := make(map[*tagState]bool, len(rp.remove)+len(rp.replace))
		for _, ts := range rp.remove {
			gone[ts] = true
		}
		r.tags = slices.DeleteFunc(r.tags, func(ts *tagState) bool { return gone[ts] })
		where := make(map[*tagState]int, len(rp.replace))
		for _, rep := range rp.replace {
			where[rep.old] = -1
		}
		for i, ts := range r.tags {
			if _, ok := where[ts]; ok {
				where[ts] = i
			}
		}
		for _, rep := range rp.replace {
			old := rep.old
			// A new state, not the old one changed: the write path reads
			// a tag's config without the runner's lock.
			nts := &tagState{cfg: rep.cfg, src: r, handle: rep.hdl, subject: rep.subj,
				seq: old.seq, last: old.last, have: old.have}
			if !rep.resub {
				nts.subscribed, nts.subErr = old.subscribed, old.subErr
			} else {
				delete(r.byHandle, old.handle)
				rp.unsubscribe = append(rp.unsubscribe, Tag{Name: old.cfg.Name, Address: old.cfg.Address, Handle: old.handle})
				rp.subscribe = true
			}
			r.byHandle[nts.handle] = nts
			if b.bySubject[old.subject] == old {
				delete(b.bySubject, old.subject)
			}
			if i := where[old]; i >= 0 {
				r.tags[i] = nts
			}
			rp.changedNames = append(rp.changedNames, rep.cfg.Name)
		}
		// The new subjects after every old one is freed: a tag may take
		// the subject another gave up.
		for _, rep := range rp.replace {
			b.bySubject[rep.subj] = r.byHandle[rep.hdl]
		}
		r.reindexLocked()
		r.mu.Unlock()
		b.addTagsLocked(r, rp.add)
		r.mu.Lock()
		r.nextHandle = max(r.nextHandle, rp.nextHdl)
		r.mu.Unlock()
		for _, ts := range rp.add {
			rp.addedNames = append(rp.addedNames, ts.cfg.Name)
		}
		if len(rp.add) > 0 {
			rp.subscribe = true
		}
	}
	for _, r := range p.added {
		b.addTagsLocked(r, p.addTags[r])
		b.sources = append(b.sources, r)
		// Started under b.mu, which Shutdown takes to see the sources:
		// a Shutdown racing the change closes this source too.
		b.startRunner(r)
	}
}

// removeTags deletes tags at r's source once no subscribe that may list
// them is on its way, and returns the problem, "" when there is none. A
// subscribe that listed a removed tag before the commit holds subMu until
// the source answered it: once it is free, the removal cannot overtake a
// creation. Later subscribes list none of them, and go at once, beside
// the removal: a source may serve both in one round (an OPC UA Pair's
// next desire). When first is not nil, the removal waits for the
// subscribe of the change's additions to list them, and then for it to
// be answered. The removal is bounded like a subscribe (the guard's
// ceiling, raised to the source's reply bound) and by the source's life.
func (b *Bridge) removeTags(r *runner, tags []Tag, first <-chan struct{}) string {
	if first != nil {
		t := time.NewTimer(r.inFlightCeiling)
		select {
		case <-first:
		case <-t.C:
		case <-r.ctx.Done():
		}
		t.Stop()
	}
	r.awaitSubscribe()
	ctx, cancel := context.WithTimeout(r.ctx, r.inFlightCeiling)
	defer cancel()
	name := r.src.Name()
	if err := r.src.Unsubscribe(ctx, tags); err != nil {
		b.log.Warn().Err(err).Str("source", name).Int("tags", len(tags)).Msg("tags not removed at the source")
		return fmt.Sprintf("source %q: %d tags not removed at the source: %v", name, len(tags), err)
	}
	return ""
}

// stopRunner stops a removed source: its guard, then the source itself.
func (b *Bridge) stopRunner(ctx context.Context, r *runner) {
	r.cancel()
	r.awaitStart(ctx)
	if err := r.src.Close(); err != nil {
		b.log.Warn().Err(err).Str("source", r.src.Name()).Msg("removed source closed with an error")
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	b.log.Info().Str("source", r.src.Name()).Msg("source removed")
}
