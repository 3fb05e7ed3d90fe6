package relay

import (
	"strings"
	"testing"

	"github.com/apbridge/apbridge/bridge/jetstreamsink"
)

// TestUnusedJetStreamSection: stream settings without the JetStream sink
// are refused for a config built in code too, with the settings' own
// problems; with the sink, or without settings, they are not.
func TestUnusedJetStreamSection(t *testing.T) {
	for _, tc := range []struct {
		sc   SinkConfig
		want []string // nil: valid
	}{
		{SinkConfig{}, nil},
		{SinkConfig{Sink: SinkCore}, nil},
		{SinkConfig{Sink: SinkJetStream, JetStream: jetstreamsink.Config{Stream: "PLANT"}}, nil},
		{SinkConfig{JetStream: jetstreamsink.Config{Stream: "PLANT"}}, []string{"jetstream: the section is given with no sink (core, the default), where it does nothing"}},
		{SinkConfig{Sink: SinkCore, JetStream: jetstreamsink.Config{Replicas: 9}},
			[]string{"jetstream: the section is given with sink: core", "jetstream.replicas: 9 is out of range"}},
		{SinkConfig{Sink: "kafka", JetStream: jetstreamsink.Config{Storage: "disk"}}, []string{`sink: "kafka"`, `jetstream.storage: "disk"`}},
	} {
		err := tc.sc.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%+v: %v", tc.sc, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want %q", tc.sc, err, w)
			}
		}
	}
}

// TestUnusedEmptyJetStreamSection: "jetstream: {}" decodes to nothing, so
// Validate cannot see it; Parse reports it by its line, with the core sink
// only (an unknown sink is reported as such).
func TestUnusedEmptyJetStreamSection(t *testing.T) {
	for _, tc := range []struct{ top, want, not string }{
		{"jetstream: {}", "config: line 1: jetstream: the section is given with no sink (core, the default)", ""},
		{"sink: core\njetstream: {}", "config: line 2: jetstream: the section is given with sink: core", ""},
		{"sink: jetstream\njetstream: {}", "", ""},
		{"sink: kafka\njetstream: {}", `sink: "kafka" is not a sink`, "the section is given"},
	} {
		_, err := Parse([]byte(tc.top + "\n" + edit("instance: site-a\n", "")))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.top, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.top, err, tc.want)
		case tc.not != "" && strings.Contains(err.Error(), tc.not):
			t.Errorf("%q: %v, want no %q", tc.top, err, tc.not)
		}
	}
}
