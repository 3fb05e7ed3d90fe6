package relay

import (
	"fmt"
	"strings"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/wire"
)

// checkSubjects checks every subject the config gives the relay (tag
// subjects, the template's results, the service prefix, the stream's
// subjects) against each other, the service subjects, the reserved subject
// spaces and the JetStream stream:
//
//   - no two tags share a subject;
//   - no tag subject, template result (for browsed tags, any the template
//     can give) or stream subject overlaps a service subject
//     (wire.ServiceSubjects: the relay's updates would arrive as its own
//     requests, with a writable tag as writes to the plant);
//   - none of them, nor the service prefix, is in a reserved subject space
//     (wire.Reserved: NATS would take a tag update on $JS.API.STREAM.DELETE.X
//     as a request to delete a stream, one on $KV.b.k as a write to a
//     bucket, one on _INBOX.x as another client's reply);
//   - a stream given subjects captures every tag; one without works its
//     subjects out from the tags at the start (jetstreamsink.DeriveSubjects)
//     and must be able to, without capturing a service subject.
//
// withSources is a relay given sources by its caller (WithSource), whose
// tags this cannot see: the stream's subjects are then worked out, and
// checked, at the start only.
func (c *Config) checkSubjects(add func(string, ...any), withSources bool) {
	prefix, tmpl := c.Service.Prefix, c.Subject
	if prefix == "" {
		prefix = wire.DefaultPrefix
	}
	if tmpl == "" {
		tmpl = wire.DefaultSubject
	}
	m, err := wire.NewMapper(tmpl)
	if err != nil || wire.ValidateSubject(prefix) != nil {
		return // reported by the field checks
	}
	if r, ok := wire.Reserved(prefix + ".status"); ok {
		add("service.prefix: %q puts the relay's service subjects in the reserved subject space %s: use a prefix of your own, such as the default %s", prefix, r, wire.DefaultPrefix)
	}
	// A template that puts every subject in a reserved space is reported
	// once, not once per tag.
	tmplReserved := false
	if r, ok := m.Reserved(); ok {
		tmplReserved = true
		add("subject: the template %q puts every tag subject in the reserved subject space %s: use a template whose first token is your own, such as the default %s", tmpl, r, wire.DefaultSubject)
	}
	svcList := wire.ServiceSubjects(prefix)
	svc := wire.NewPatterns(svcList...)
	// Tags are held as where they are and a pointer to their fields, and
	// the maps sized once: a config of 10,000 tags is checked at every
	// change.
	type tagSubject struct {
		entry   subjectTag
		subject string
	}
	n := 0
	for _, s := range c.Sources {
		n += len(s.Tags) + len(s.MxGateway.Tags)
		for _, g := range s.Groups {
			n += len(g.Tags)
		}
	}
	all := make([]tagSubject, 0, n)
	owner := make(map[string]subjectTag, n)
	bySource := map[string][]string{} // tag subjects, for a stream's subjects worked out
	later := map[string]string{}      // sources with browse roots: what their tags fall under
	// incomplete is set when a source or a tag's subject is refused: the
	// stream's subjects worked out without it would only add confusion.
	incomplete := false
	for i, s := range c.Sources {
		f := fmt.Sprintf("sources[%d]", i)
		if s.Name == "" {
			incomplete = true
			continue
		}
		switch s.Type {
		case "", TypeOPCUA, TypeMxGateway:
		default:
			incomplete = true
			continue
		}
		tags := subjectTagsOf(s, f)
		subjects := make([]string, 0, len(tags))
		for _, e := range tags {
			t := e.t
			subject, own := t.Subject, t.Subject != ""
			if !own {
				if t.Name == "" || (t.Address == "" && strings.Contains(tmpl, "{address}")) {
					incomplete = true
					continue // reported by the field checks
				}
				if subject, err = m.Subject(s.Name, t.Name, t.Address); err != nil {
					add("%s: %v", e.field(), err)
					incomplete = true
					continue
				}
			} else if wire.ValidateSubject(subject) != nil {
				incomplete = true
				continue
			}
			toks := wire.Tokenize(subject)
			r, reserved := toks.Reserved()
			sv, overlaps := svc.OverlappingTokens(toks)
			if overlaps || reserved {
				incomplete = true
			}
			switch {
			case overlaps:
				add("%s: subject %q overlaps the service subject %q: the relay's own updates would arrive as requests (change the tag's subject, the template or service.prefix)", e.field(), subject, sv)
			case reserved && own:
				add("%s.subject: %q (tag %q) is in the reserved subject space %s: NATS would take the tag's updates as its own traffic (give the tag a subject outside the spaces NATS reserves)", e.field(), subject, t.Name, r)
			case reserved && !tmplReserved:
				add("%s: the template %q gives tag %q the subject %q, in the reserved subject space %s: NATS would take the tag's updates as its own traffic (rename the source or the tag, give the tag a subject, or change the template)", e.field(), tmpl, t.Name, subject, r)
			}
			if other, dup := owner[subject]; dup {
				add("%s: subject %q is also the subject of %s (each tag needs a subject of its own)", e.field(), subject, other.field())
				incomplete = true
				continue
			}
			owner[subject] = e
			all = append(all, tagSubject{e, subject})
			subjects = append(subjects, subject)
		}
		if len(subjects) > 0 {
			bySource[s.Name] = append(bySource[s.Name], subjects...)
		}
		if len(s.Browse) > 0 && (s.Type == "" || s.Type == TypeOPCUA) {
			later[s.Name] = m.SourcePattern(s.Name)
			for _, sv := range svcList {
				if m.CanOverlap(s.Name, sv) {
					add("%s.browse: the subject template %q can give a browsed tag of source %q a subject under the service subject %q; use a template or service.prefix that keeps them apart", f, tmpl, s.Name, sv)
					break
				}
			}
			if r, ok := m.CanBeReserved(s.Name); ok && !tmplReserved {
				add("%s.browse: the subject template %q can give a browsed tag of source %q a subject in the reserved subject space %s: the servers name browsed tags, so use a template whose first token is your own, such as the default %s", f, tmpl, s.Name, r, wire.DefaultSubject)
			}
		}
	}
	if c.Sink != SinkJetStream {
		return
	}
	if len(c.JetStream.Subjects) == 0 {
		if !withSources && !incomplete {
			checkDerivedSubjects(bySource, later, svc, add)
		}
		return
	}
	valid := true
	for k, js := range c.JetStream.Subjects {
		if wire.ValidatePattern(js) != nil {
			valid = false
			continue
		}
		if sv, ok := svc.Overlapping(js); ok {
			add("jetstream.subjects[%d]: %q overlaps the service subject %q: the stream would capture the relay's requests", k, js, sv)
		}
	}
	if !valid {
		return // a bad pattern is reported by the field checks
	}
	stream := wire.NewPatterns(c.JetStream.Subjects...)
	for _, ts := range all {
		if _, covered := stream.Covering(ts.subject); !covered {
			add("%s: subject %q is not captured by jetstream.subjects %v (add a subject that covers it)", ts.entry.field(), ts.subject, c.JetStream.Subjects)
		}
	}
}

// checkDerivedSubjects works the stream's subjects out from the tags as
// the JetStream sink does at the start when jetstream.subjects is not
// given (jetstreamsink.DeriveSubjects, by source), and reports what would
// make that start fail: subjects that cannot be worked out, or one that
// captures a service subject (tags of one source under two roots give
// their common root, which may be the service prefix's). Without it,
// validate would accept a config that run refuses.
func checkDerivedSubjects(bySource map[string][]string, later map[string]string, svc wire.Patterns, add func(string, ...any)) {
	derived, err := jetstreamsink.DeriveSubjects(bySource, later)
	if err != nil {
		add("%v", err)
		return
	}
	for _, p := range derived {
		if sv, ok := svc.Overlapping(p); ok {
			add("jetstream.subjects: not given, so the stream's subjects are worked out from the tags' subjects as %v, and %q would capture the service subject %q: set jetstream.subjects, or give each source's tags a subject root of their own", derived, p, sv)
		}
	}
}

// subjectTag is a tag as checkSubjects sees it: where it is, for
// messages, and its fields, not copied.
type subjectTag struct {
	src        string
	group, idx int
	t          *bridge.TagConfig
}

// field is the path of the tag's config, as tagEntry.field writes it.
func (e subjectTag) field() string { return tagEntry{src: e.src, group: e.group, idx: e.idx}.field() }

// subjectTagsOf lists the source's tags in listedTags' order (a gateway
// source's in its list's); f is the source's path.
func subjectTagsOf(s SourceConfig, f string) []subjectTag {
	if s.Type == TypeMxGateway {
		out := make([]subjectTag, len(s.MxGateway.Tags))
		for j := range s.MxGateway.Tags {
			out[j] = subjectTag{f, -1, j, &s.MxGateway.Tags[j]}
		}
		return out
	}
	n := len(s.Tags)
	for _, g := range s.Groups {
		n += len(g.Tags)
	}
	out := make([]subjectTag, 0, n)
	for j := range s.Tags {
		out = append(out, subjectTag{f, -1, j, &s.Tags[j].TagConfig})
	}
	for g, grp := range s.Groups {
		for j := range grp.Tags {
			out = append(out, subjectTag{f, g, j, &grp.Tags[j].TagConfig})
		}
	}
	return out
}
