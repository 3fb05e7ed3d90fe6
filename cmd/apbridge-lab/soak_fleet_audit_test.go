package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// soakStored is a stored counter update of soak.line1.Counter0: its value,
// publisher (relay ID and lease token), the publisher's sequence number
// and its source time in ms. id overrides the message ID (the value's by
// default). A negative value stands for an update of a tag that is not a
// counter (Bool0), which only its ID identifies.
type soakStored struct {
	value int64
	relay string
	token uint64
	seq   uint64
	at    int
	id    string
}

func soakStoredMsgs(t *testing.T, t0 time.Time, in []soakStored) []natstest.StoredMsg {
	t.Helper()
	var out []natstest.StoredMsg
	for i, s := range in {
		u := wire.Update{Tag: "Counter0", Value: s.value, Status: wire.StatusGood, SourceTime: t0.Add(time.Duration(s.at) * time.Millisecond), Seq: s.seq}
		if s.value < 0 {
			u.Tag, u.Value = "Bool0", true
		}
		b, err := wire.AppendJSON(nil, &u)
		if err != nil {
			t.Fatal(err)
		}
		id := s.id
		if id == "" {
			id = wire.MessageID("line1", &u)
		}
		h := nats.Header{}
		h.Set(wire.HeaderRelay, s.relay)
		h.Set(wire.HeaderLease, strconv.FormatUint(s.token, 10))
		out = append(out, natstest.StoredMsg{Seq: uint64(i + 1), Subject: "soak.line1." + u.Tag, MsgID: id, Header: h, Data: b})
	}
	return out
}

// The identity check tells, at each hole in a counter's values, a relay's
// loss from what the source never delivered and from what no relay ran a
// session for; repeats and reordering are counted whoever published.
func TestAuditIdentity(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kill := soakKill{relay: "r1", at: t0.Add(250 * time.Millisecond), sources: []string{"line1"}, where: soakWhere{soakRelayKill, 3}}
	cases := []struct {
		name      string
		stored    []soakStored
		kills     []soakKill
		published bool // the subscriber saw every value published
		want      soakIDKind
		wantKind  string
	}{
		{"no hole", []soakStored{{1, "r1", 5, 1, 0, ""}, {2, "r1", 5, 2, 100, ""}, {3, "r2", 9, 1, 200, ""}}, nil, false,
			soakIDKind{}, "f"},
		{"same relay, numbers missing: lost", []soakStored{{1, "r1", 5, 1, 0, ""}, {4, "r1", 5, 4, 300, ""}}, nil, true,
			soakIDKind{Lost: 2, LostPublished: 2}, "f"},
		{"same relay, numbers in a row: the source skipped", []soakStored{{1, "r1", 5, 1, 0, ""}, {4, "r1", 5, 2, 300, ""}}, nil, false,
			soakIDKind{Skipped: 2}, "f"},
		{"same relay, one number missing for two values", []soakStored{{1, "r1", 5, 1, 0, ""}, {4, "r1", 5, 3, 300, ""}}, nil, false,
			soakIDKind{Lost: 1, Skipped: 1}, "f"},
		// Values 2 (100 ms) and 3 (200 ms) were produced before the kill
		// (250 ms), 4 to 6 after, until the new owner's first value.
		{"a kill: lost before it, unserved after", []soakStored{{1, "r1", 5, 1, 0, ""}, {7, "r2", 9, 1, 600, ""}}, []soakKill{kill}, false,
			soakIDKind{Lost: 2, Unserved: 3}, soakRelayKill},
		{"another owner without a kill: lost", []soakStored{{1, "r1", 5, 1, 0, ""}, {4, "r2", 9, 1, 300, ""}}, nil, false,
			soakIDKind{Lost: 2}, "f"},
		{"the same ID twice", []soakStored{{1, "r1", 5, 1, 0, ""}, {1, "r2", 9, 1, 0, ""}, {2, "r2", 9, 2, 100, ""}}, nil, false,
			soakIDKind{Duplicated: 1}, "f"},
		{"the same ID twice, not a counter", []soakStored{{-1, "r1", 5, 1, 0, ""}, {-1, "r2", 9, 1, 0, ""}}, nil, false,
			soakIDKind{Duplicated: 1}, "f"},
		{"the same value under another ID", []soakStored{{1, "r1", 5, 1, 0, ""}, {1, "r2", 9, 1, 0, "other"}}, nil, false,
			soakIDKind{Duplicated: 1}, "f"},
		{"late, not lost", []soakStored{{1, "r1", 5, 1, 0, ""}, {3, "r1", 5, 3, 200, ""}, {2, "r1", 5, 2, 100, ""}}, nil, false,
			soakIDKind{Reordered: 1}, "f"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := auditIdentity(soakStoredMsgs(t, t0, c.stored), soakAuditCtx{
				whereAt:   func(time.Time) soakWhere { return soakWhere{"f", 1} },
				kills:     c.kills,
				published: func(string, soakOwner, int64) bool { return c.published },
			})
			var g soakIDKind
			if kc := got.Kinds[c.wantKind]; kc != nil {
				g = *kc
			}
			if g != c.want {
				t.Errorf("kind %s: got %+v, want %+v (all: %v)", c.wantKind, g, c.want, got.Kinds)
			}
			if got.Lost != c.want.Lost || got.Unserved != c.want.Unserved {
				t.Errorf("totals: lost %d, unserved %d", got.Lost, got.Unserved)
			}
			// A kill's values are split by source (here all of line1).
			if c.wantKind == soakRelayKill && (got.LostBySource["line1"] != c.want.Lost || got.UnservedBySource["line1"] != c.want.Unserved) {
				t.Errorf("by source: lost %v, unserved %v", got.LostBySource, got.UnservedBySource)
			}
			// And by kill, for its takeover's line.
			if c.wantKind == soakRelayKill {
				if kc := got.ByKill[soakKillSource{0, "line1"}]; kc == nil || kc.lost != c.want.Lost || kc.unserved != c.want.Unserved {
					t.Errorf("by kill: %v", got.ByKill)
				}
			}
		})
	}
}

// The owners seen in the updates give each kill's takeover: who published
// before and after, when the new owner's first update came, whether the
// dead relay published after it, and the overlap of the handover back.
func TestSoakOwnersTakeovers(t *testing.T) {
	w := newSoakOwners()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r1, r2, r1b := soakOwner{"r1", 5}, soakOwner{"r2", 9}, soakOwner{"r1", 12}
	w.note("line1", r1, at(0))
	w.note("line1", r2, at(3100)) // taken over
	w.note("line1", r1, at(3120)) // what the dead relay had in flight
	w.note("line1", r2, at(3200))
	w.note("line1", r1b, at(8000)) // started again, handed back
	w.note("line1", r2, at(8900))  // the overlap of the handover back
	got, unseen := w.takeovers([]soakKill{{relay: "r1", at: at(50), sources: []string{"line1"}, where: soakWhere{soakRelayKill, 2}}})
	if len(unseen) != 0 {
		t.Fatal(unseen)
	}
	want := soakTakeover{Source: "line1", Before: "r1", After: "r2", Ms: 3050, DualMs: 20, BackMs: 900, Cycle: 2, Token: 9}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// A kill whose source nobody took over is reported as unseen.
	if _, unseen := w.takeovers([]soakKill{{relay: "r2", at: at(9500), sources: []string{"line1"}}}); len(unseen) != 1 {
		t.Fatalf("a takeover that never happened: unseen %v", unseen)
	}
}

// A value the relay carried as the server sent it, Bad_OutOfService from a
// server going out of service, is in the stream: no hole. The same value
// in Good from the standby afterwards is another update, not a copy.
func TestAuditIdentityStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	msgs := soakStoredMsgs(t, t0, []soakStored{{1, "r1", 5, 1, 0, ""}, {2, "r1", 5, 2, 100, ""}, {2, "r1", 5, 3, 150, ""}, {3, "r1", 5, 4, 200, ""}})
	u, err := wire.DecodeJSON(msgs[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	u.Status = 0x808D0000 // Bad_OutOfService
	if msgs[1].Data, err = wire.AppendJSON(nil, &u); err != nil {
		t.Fatal(err)
	}
	msgs[1].MsgID = wire.MessageID("line1", &u)
	got := auditIdentity(msgs, soakAuditCtx{whereAt: func(time.Time) soakWhere { return soakWhere{"f", 1} }})
	if got.Lost != 0 || got.Skipped != 0 || got.Duplicated != 0 || got.Counted != 4 {
		t.Fatalf("got %+v, want 4 values checked and no problem", got)
	}
}

// An unchanged tag's update sent again to a new session is stored again
// once the stream's duplicate window has passed: counted apart, not as a
// copy; inside the window it is a copy the stream should have dropped.
func TestAuditIdentityStoredAgain(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		apart          time.Duration
		dup, storedAgn uint64
	}{{3 * time.Minute, 0, 1}, {time.Minute, 1, 0}} {
		msgs := soakStoredMsgs(t, t0, []soakStored{{-1, "r1", 5, 1, 0, ""}, {-1, "r2", 9, 1, 0, ""}})
		msgs[0].Time, msgs[1].Time = t0, t0.Add(c.apart)
		got := auditIdentity(msgs, soakAuditCtx{whereAt: func(time.Time) soakWhere { return soakWhere{"f", 1} }, dupWindow: 2 * time.Minute})
		if got.Duplicated != c.dup || got.StoredAgain != c.storedAgn {
			t.Errorf("%v apart: duplicated %d, stored again %d; want %d, %d", c.apart, got.Duplicated, got.StoredAgain, c.dup, c.storedAgn)
		}
	}
}
