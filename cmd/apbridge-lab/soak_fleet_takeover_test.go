package main

import (
	"strings"
	"testing"
)

// A relay's log tells each instance's takeover by its lease token: a
// transfer with what the server held and gave back, a fallback with the
// server's or the Pair's reason, a handoff that did not fit, a record of
// a switch, and an instance that read no handoff.
func TestSoakInstances(t *testing.T) {
	log := strings.Join([]string{
		`{"level":"info","source":"line2","from":"r1","token":3,"message":"fleet: taking over the previous owner's subscription"}`,
		`{"level":"info","source":"line2","token":9,"message":"fleet: source owned, started"}`,
		`not a log line`,
		`{"level":"info","source":"line2","event":"successor takeover","member":"primary","message":"primary: the predecessor's data subscription 6 taken over (4 messages held by the server, from 31 on); no snapshot"}`,
		`{"level":"info","source":"line2","republished":37,"message":"the successor caught up with what the server held for its predecessor"}`,
		`{"level":"info","source":"line1","from":"r2","token":38,"message":"fleet: taking over the previous owner's subscription"}`,
		`{"level":"info","source":"line1","token":41,"message":"fleet: source owned, started"}`,
		`{"level":"warn","source":"line1","event":"successor takeover","member":"backup","error":"the predecessor served from the backup","message":"backup: not taken over"}`,
		`{"level":"info","source":"line1","from":"r3","token":50,"message":"fleet: taking over the previous owner's subscription"}`,
		`{"level":"warn","source":"line1","error":"recorded for primary x","message":"the predecessor's handoff does not fit this source: new subscriptions and a snapshot"}`,
		`{"level":"info","source":"line1","token":55,"message":"fleet: source owned, started"}`,
		`{"level":"info","source":"galaxy2","token":60,"message":"fleet: source owned, started"}`,
		`{"level":"info","source":"galaxy","from":"r1","token":61,"session":"s1","lastStored":90,"message":"fleet: resuming the previous owner's gateway session"}`,
		`{"level":"info","source":"galaxy","token":70,"message":"fleet: source owned, started"}`,
		`{"level":"info","source":"galaxy","endpoint":"gw1","session":"s1","after":90,"message":"predecessor's gateway session resumed"}`,
		`{"level":"info","source":"galaxy2","from":"r2","token":60,"session":"s2","lastStored":7,"message":"fleet: resuming the previous owner's gateway session"}`,
		`{"level":"info","source":"galaxy2","token":72,"message":"fleet: source owned, started"}`,
		`{"level":"warn","source":"galaxy2","endpoint":"gw2","session":"s2","reason":"session gone","message":"predecessor's gateway session not resumed: opening a new one and subscribing again with a refresh; changes since its last stored event are lost"}`,
		`{"level":"info","source":"line2","from":"r4","token":80,"message":"fleet: the previous owner had just switched to its backup: starting there, with new subscriptions"}`,
		`{"level":"warn","source":"line2","event":"successor takeover","member":"backup","error":"the predecessor had just switched to this server","message":"backup: not taken over"}`,
		`{"level":"info","source":"line2","token":81,"message":"fleet: source owned, started"}`,
	}, "\n")
	got, err := soakInstances(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := map[soakInstance]soakTakeoverOutcome{
		{"line2", 9}:    {Outcome: soakTransferred, HandoffFrom: "r1", Held: 4, Republished: 37},
		{"line1", 41}:   {Outcome: soakFallback, HandoffFrom: "r2", Reason: "the predecessor served from the backup"},
		{"line1", 55}:   {Outcome: soakFallback, HandoffFrom: "r3", Reason: "handoff does not fit: recorded for primary x"},
		{"galaxy2", 60}: {Outcome: soakNoHandoff},
		{"galaxy", 70}:  {Outcome: soakTransferred, HandoffFrom: "r1"},
		{"galaxy2", 72}: {Outcome: soakFallback, HandoffFrom: "r2", Reason: "session gone"},
		// Told before its start line, and not the previous instance's.
		{"line2", 81}: {Outcome: soakFallback, HandoffFrom: "r4", Reason: "the previous owner had just switched servers"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%v: got %+v, want %+v", k, got[k], w)
		}
	}
}
