package relay

import (
	"fmt"
	"unicode"
)

// checkNames refuses control characters (C0, DEL and C1: newline, CR, NUL,
// escape, ...) in the names the config gives: the relay's instance and
// connection name, source, group and tag names, browse prefixes (part of
// the names of browsed tags) and a gateway source's client name. A name
// shows up in log lines, status replies, metrics labels, event subjects
// and the servers' connection lists, where a newline forges a log line,
// an escape sequence rewrites a terminal, and a NUL cuts the name short.
// The other names are checked by their own rules, which admit no control
// character either: service.name (letters, digits, '-', '_'), the fleet's
// relayId and bucket (letters, digits, '-', '_', '='), jetstream.stream.
func (c *Config) checkNames(add func(string, ...any)) {
	check := func(field, name string) {
		for i, r := range name {
			if unicode.IsControl(r) {
				add("%s: %q holds the control character %U at byte %d: names appear in logs, status replies and metrics, where it would break or forge lines (use printable characters)", field, name, r, i)
				return
			}
		}
	}
	check("instance", c.Instance)
	check("nats.name", c.NATS.Name)
	for i, s := range c.Sources {
		f := fmt.Sprintf("sources[%d]", i)
		check(f+".name", s.Name)
		switch s.Type {
		case "", TypeOPCUA:
			// Names only: the tags are not copied (listedTags) for it.
			for j, t := range s.Tags {
				if hasControl(t.Name) {
					check(tagEntry{src: f, group: -1, idx: j}.field()+".name", t.Name)
				}
			}
			for g, grp := range s.Groups {
				for j, t := range grp.Tags {
					if hasControl(t.Name) {
						check(tagEntry{src: f, group: g, idx: j}.field()+".name", t.Name)
					}
				}
			}
			for g, grp := range s.Groups {
				check(fmt.Sprintf("%s.groups[%d].name", f, g), grp.Name)
			}
			for j, b := range s.Browse {
				check(fmt.Sprintf("%s.browse[%d].prefix", f, j), b.Prefix)
			}
		case TypeMxGateway:
			for j, t := range s.MxGateway.Tags {
				check(fmt.Sprintf("%s.tags[%d].name", f, j), t.Name)
			}
			check(f+".clientName", s.MxGateway.ClientName)
		}
	}
}

// hasControl reports whether name holds a control character, which
// checkNames refuses.
func hasControl(name string) bool {
	for _, r := range name {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
