package bridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/apbridge/apbridge/wire"
)

// TagConfig is one tag of a source.
type TagConfig struct {
	// Name is the tag's name, unique within its source.
	Name string `yaml:"name" json:"name"`
	// Address is where the source finds it (an OPC UA node ID).
	Address string `yaml:"address" json:"address"`
	// Subject overrides the subject template for this tag.
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
	// Writable allows write-back through <prefix>.write.<subject>.
	Writable bool `yaml:"writable,omitempty" json:"writable,omitempty"`
}

// tagState is a tag as the bridge tracks it.
type tagState struct {
	cfg     TagConfig
	src     *runner
	subject string
	handle  uint32 // beside the two flags: 224 bytes a tag, not 240

	// Guarded by the runner's mu.
	have       bool
	subscribed bool
	seq        uint64
	last       wire.Update
	subErr     string
}

// AddSource adds a source and its tags. Every tag's subject is worked out
// and checked now: an error names the tag. A source may come with no tags
// and get them later with AddTags (a source whose tags are found by
// browsing its servers); give it WithTagsLater so that a sink learns which
// subjects they will have.
func (b *Bridge) AddSource(src Source, tags []TagConfig, opts ...SourceOption) error {
	var so sourceOptions
	for _, opt := range opts {
		opt(&so)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("bridge: AddSource after Start")
	}
	name := src.Name()
	for _, r := range b.sources {
		if r.src.Name() == name {
			return fmt.Errorf("bridge: source %q added twice", name)
		}
	}
	r := newRunner(b, src)
	r.tagsLater = so.tagsLater
	added, err := b.newTagsLocked(r, tags)
	if err != nil {
		return err
	}
	b.addTagsLocked(r, added)
	b.sources = append(b.sources, r)
	return nil
}

// SourceOption configures a source as AddSource adds it.
type SourceOption func(*sourceOptions)

type sourceOptions struct {
	tagsLater bool
}

// WithTagsLater tells the bridge that the source's tags, or more of them,
// come later through AddTags, each on the subject the template gives it.
// A Binder is told so (Subjects.Later), so that a stream can capture them.
func WithTagsLater() SourceOption {
	return func(o *sourceOptions) { o.tagsLater = true }
}

// AddTags adds tags to a source, before or after Start: a started bridge
// subscribes them through the source's guard, as it did the first ones.
// Every tag is checked first, and a Binder sink (a stream) is asked whether
// it takes their subjects; an error names the tag and adds none of them.
func (b *Bridge) AddTags(ctx context.Context, source string, tags []TagConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("bridge: AddTags after Close")
	}
	var r *runner
	for _, rn := range b.sources {
		if rn.src.Name() == source {
			r = rn
		}
	}
	if r == nil {
		return fmt.Errorf("bridge: AddTags: no source %q", source)
	}
	added, err := b.newTagsLocked(r, tags)
	if err != nil {
		return err
	}
	if bs, ok := b.sink.(Binder); ok && b.started {
		// The sink checks the whole set again, as at Start: a stream
		// must capture the new subjects too.
		subj := b.subjects(b.sources)
		for _, ts := range added {
			subj.Tags[source] = append(subj.Tags[source], ts.subject)
		}
		if err := bs.Bind(ctx, subj); err != nil {
			return err
		}
	}
	b.addTagsLocked(r, added)
	if b.started {
		r.want()
	}
	return nil
}

// newTagsLocked works out and checks the subjects of tags, new to r, and
// returns their states; it changes nothing. b.mu is held.
func (b *Bridge) newTagsLocked(r *runner, tags []TagConfig) ([]*tagState, error) {
	name := r.src.Name()
	r.mu.Lock()
	seen := make(map[string]bool, len(r.tags)+len(tags))
	for _, ts := range r.tags {
		seen[ts.cfg.Name] = true
	}
	next := r.nextHandle
	r.mu.Unlock()
	// Tokenized once: at 10,000 tags, tokenizing them again for every tag
	// made 19 MB of garbage at startup, and the heap it grew stayed
	// resident.
	chk := b.newSubjectCheck(len(tags))
	out := make([]*tagState, 0, len(tags))
	for i, tc := range tags {
		if tc.Name == "" {
			return nil, fmt.Errorf("bridge: source %q: tags[%d]: name is empty", name, i)
		}
		if seen[tc.Name] {
			return nil, fmt.Errorf("bridge: source %q: tag %q is listed twice", name, tc.Name)
		}
		seen[tc.Name] = true
		subj, err := chk.subject(name, tc)
		if err != nil {
			return nil, err
		}
		out = append(out, &tagState{cfg: tc, src: r, handle: next + uint32(i), subject: subj})
	}
	return out, nil
}

// subjectCheck works out tags' subjects and checks them against the
// service subjects, the reserved spaces and every other tag's subject.
type subjectCheck struct {
	b   *Bridge
	svc wire.Patterns
	// taken are the subjects of the tags already there (b.bySubject
	// unless a change frees some): subject -> the tag that holds it,
	// formatted only for an error (a string per tag was 0.5 MB of garbage
	// at 10,000 tags).
	taken map[string]takenBy
	// freed are subjects of b.bySubject that a change gives up.
	freed map[string]bool
}

// takenBy is the tag of a source that takes a subject.
type takenBy struct{ tag, source string }

// newSubjectCheck checks against the bridge's tags as they are, for about
// n more; b.mu is held.
func (b *Bridge) newSubjectCheck(n int) *subjectCheck {
	return &subjectCheck{b: b, svc: wire.NewPatterns(wire.ServiceSubjects(b.cfg.Prefix)...),
		taken: make(map[string]takenBy, n), freed: map[string]bool{}}
}

// free gives up subject: a tag that leaves, or moves, no longer holds it.
func (c *subjectCheck) free(subject string) { c.freed[subject] = true }

// subject returns the subject of tag tc of source, and takes it; an error
// names the tag.
func (c *subjectCheck) subject(source string, tc TagConfig) (string, error) {
	subj := tc.Subject
	if subj == "" {
		s, err := c.b.mapper.Subject(source, tc.Name, tc.Address)
		if err != nil {
			return "", fmt.Errorf("bridge: source %q: %w", source, err)
		}
		subj = s
	} else if err := wire.ValidateSubject(subj); err != nil {
		return "", fmt.Errorf("bridge: source %q: tag %q: %w", source, tc.Name, err)
	}
	// Split into tokens once for both checks.
	toks := wire.Tokenize(subj)
	if sv, ok := c.svc.OverlappingTokens(toks); ok {
		return "", fmt.Errorf("bridge: source %q: tag %q: subject %q overlaps the service subject %q (updates would arrive as requests)",
			source, tc.Name, subj, sv)
	}
	if r, ok := toks.Reserved(); ok {
		return "", fmt.Errorf("bridge: source %q: tag %q: subject %q is in the reserved subject space %s: NATS would take its updates as its own traffic",
			source, tc.Name, subj, r)
	}
	if other, dup := c.b.bySubject[subj]; dup && !c.freed[subj] {
		return "", fmt.Errorf("bridge: source %q: tag %q maps to subject %q, like tag %q of source %q",
			source, tc.Name, subj, other.cfg.Name, other.src.src.Name())
	}
	if other, dup := c.taken[subj]; dup {
		return "", fmt.Errorf("bridge: source %q: tag %q maps to subject %q, like tag %q of source %q", source, tc.Name, subj, other.tag, other.source)
	}
	c.taken[subj] = takenBy{tag: tc.Name, source: source}
	return subj, nil
}

// addTagsLocked makes tags r's. b.mu is held.
func (b *Bridge) addTagsLocked(r *runner, tags []*tagState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ts := range tags {
		r.tags = append(r.tags, ts)
		r.byHandle[ts.handle] = ts
		b.bySubject[ts.subject] = ts
		r.nextHandle = max(r.nextHandle, ts.handle+1)
	}
	r.reindexLocked()
}

// Subject returns the subject a tag of a source is published on.
func (b *Bridge) Subject(source, tag string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.sources {
		if r.src.Name() != source {
			continue
		}
		for _, ts := range r.tags {
			if ts.cfg.Name == tag {
				return ts.subject, true
			}
		}
	}
	return "", false
}

// WriteSubject returns the subject to send write requests for a tag to.
func (b *Bridge) WriteSubject(source, tag string) (string, bool) {
	s, ok := b.Subject(source, tag)
	if !ok {
		return "", false
	}
	return wire.WriteSubject(b.cfg.Prefix, s), true
}

// subjects returns the bridge's subjects for a Binder.
func (b *Bridge) subjects(sources []*runner) Subjects {
	tags := make(map[string][]string, len(sources))
	later := map[string]string{}
	for _, r := range sources {
		name := r.src.Name()
		r.mu.Lock()
		list := make([]string, 0, len(r.tags))
		for _, ts := range r.tags {
			list = append(list, ts.subject)
		}
		tags[name] = append(tags[name], list...)
		r.mu.Unlock()
		if r.tagsLater {
			later[name] = b.mapper.SourcePattern(name)
		}
	}
	return Subjects{Prefix: b.cfg.Prefix, Tags: tags, Later: later}
}
