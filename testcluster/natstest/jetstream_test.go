package natstest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStreamLeaderFollowsAKill finds the leader of an R3 stream, kills
// it, finds the new one, and waits for the restarted node to be current.
func TestStreamLeaderFollowsAKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startCluster(t, WithJetStream())
	nc := connect(t, c, c.URLs()[0])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L", Subjects: []string{"l.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	leader, err := c.StreamLeader(ctx, "L")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamCurrent(ctx, "L"); err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	next, err := c.StreamLeader(ctx, "L")
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("leader %s killed but still reported", leader.Name())
	}
	if err := leader.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStreamCurrent(ctx, "L"); err != nil {
		t.Fatal(err)
	}
}

// TestSingleNodeJetStream: a one-node cluster with JetStream starts (no
// cluster block to wait on) and stores.
func TestSingleNodeJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, WithNodes(1), WithJetStream())
	nc := connect(t, c, c.URLs()[0])
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ONE", Subjects: []string{"one.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m := nats.NewMsg("one.a")
		m.Header.Set(jetstream.MsgIDHeader, string(rune('a'+i)))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadStream(ctx, nc, "ONE")
	if err != nil || len(got) != 3 || got[2].MsgID != "c" {
		t.Fatalf("read %+v, %v", got, err)
	}
}

// TestAuditFindsEveryKindOfProblem is the audit's positive control: it
// must see loss, copies, reordering and strangers.
func TestAuditFindsEveryKindOfProblem(t *testing.T) {
	expected := map[string][]string{"a": {"a1", "a2", "a3", "a3"}, "b": {"b1", "b2"}}
	msg := func(subj, id string) StoredMsg { return StoredMsg{Subject: subj, MsgID: id} }
	cases := []struct {
		name   string
		stored []StoredMsg
		want   StreamAudit
	}{
		{"exact", []StoredMsg{msg("a", "a1"), msg("b", "b1"), msg("a", "a2"), msg("b", "b2"), msg("a", "a3")},
			StreamAudit{Expected: 5, Stored: 5}},
		{"lost", []StoredMsg{msg("a", "a1"), msg("a", "a3"), msg("b", "b1"), msg("b", "b2")},
			StreamAudit{Expected: 5, Stored: 4, Lost: 1}},
		{"duplicated", []StoredMsg{msg("a", "a1"), msg("a", "a1"), msg("a", "a2"), msg("a", "a3"), msg("b", "b1"), msg("b", "b2")},
			StreamAudit{Expected: 5, Stored: 6, Duplicated: 1}},
		{"reordered", []StoredMsg{msg("a", "a2"), msg("a", "a1"), msg("a", "a3"), msg("b", "b1"), msg("b", "b2")},
			StreamAudit{Expected: 5, Stored: 5, OutOfOrder: 1}},
		{"stranger", []StoredMsg{msg("a", "a1"), msg("a", "a2"), msg("a", "a3"), msg("a", "zz"), msg("b", "b1"), msg("b", "b2"), msg("other", "x")},
			StreamAudit{Expected: 5, Stored: 6, Unexpected: 1}},
	}
	for _, c := range cases {
		got := Audit(expected, c.stored)
		got.Examples = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if got.OK() != (c.name == "exact") {
			t.Errorf("%s: OK() = %v", c.name, got.OK())
		}
	}
}
