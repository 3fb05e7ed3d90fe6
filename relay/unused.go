package relay

import (
	"fmt"
	"reflect"

	"gopkg.in/yaml.v3"
)

// A section that does nothing under the settings chosen is refused, not
// ignored: its author meant it to do something. The one such section is
// jetstream without sink: jetstream, where a relay meant to store every
// update exactly once would publish at most once on core NATS. It is an
// error rather than a warning because the difference is lost data, which
// a log line read later does not bring back.

// hasJetStream reports whether any JetStream setting is given.
func (c SinkConfig) hasJetStream() bool { return !reflect.ValueOf(c.JetStream).IsZero() }

// errUnusedJetStream is the error of JetStream settings beside the core
// sink (sink is "" or "core").
func errUnusedJetStream(sink string) error {
	how := "sink: core"
	if sink == "" {
		how = "no sink (core, the default)"
	}
	return fmt.Errorf("jetstream: the section is given with %s, where it does nothing: the relay would publish at most once on core NATS, and store nothing (add sink: jetstream, or remove the section)", how)
}

// unusedSections reports a section written in the file that does nothing
// under the settings chosen and that Validate cannot see, because it
// decoded to nothing: "jetstream: {}" without sink: jetstream.
func (c *Config) unusedSections(doc *yaml.Node) []error {
	if c.Sink != "" && c.Sink != SinkCore || c.hasJetStream() {
		return nil // used, or reported by Validate (with a sink that is none)
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "jetstream" {
			return []error{fmt.Errorf("config: line %d: %w", doc.Content[i].Line, errUnusedJetStream(c.Sink))}
		}
	}
	return nil
}
