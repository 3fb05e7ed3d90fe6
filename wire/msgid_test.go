package wire

import (
	"testing"
	"time"
)

func TestMessageIDIsTheSourcesIdentity(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	u := Update{Tag: "T1", Value: 21.5, Status: StatusGood, SourceTime: at, ServerTime: at.Add(time.Millisecond), Seq: 7}
	id := MessageID("pair1", &u)
	same := u
	same.Seq, same.ServerTime = 99, at.Add(time.Second) // relay-local or server-local: not part of the identity
	same.SourceTime = at.In(time.FixedZone("X", 3600))
	if got := MessageID("pair1", &same); got != id {
		t.Fatalf("same update, other relay: %s != %s", got, id)
	}
	for name, v := range map[string]Update{
		"value":       {Tag: "T1", Value: 21.6, Status: StatusGood, SourceTime: at},
		"type":        {Tag: "T1", Value: float32(21.5), Status: StatusGood, SourceTime: at},
		"status":      {Tag: "T1", Value: 21.5, Status: StatusUncertain, SourceTime: at},
		"source time": {Tag: "T1", Value: 21.5, Status: StatusGood, SourceTime: at.Add(time.Nanosecond)},
		"tag":         {Tag: "T2", Value: 21.5, Status: StatusGood, SourceTime: at},
	} {
		if MessageID("pair1", &v) == id {
			t.Errorf("a different %s gives the same ID", name)
		}
	}
	if MessageID("pair2", &u) == id {
		t.Error("a different source gives the same ID")
	}
	// Without a source timestamp the server timestamp identifies it.
	a := Update{Tag: "T1", Value: int64(1), ServerTime: at}
	b := a
	b.ServerTime = at.Add(time.Millisecond)
	if MessageID("p", &a) == MessageID("p", &b) {
		t.Error("server time ignored when there is no source time")
	}
}

// TestMessageIDIsStable: the ID of a fixed update is what it has always
// been (streams deduplicate across relay versions), and MessageIDSum is
// the sum it is the text of.
func TestMessageIDIsStable(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	u := Update{Tag: "T1", Value: 21.5, Status: StatusGood, SourceTime: at}
	const want = "7IIVkVs_enn0ZVpwVhW-zw" // from the code before MessageIDSum
	if got := MessageID("pair1", &u); got != want {
		t.Fatalf("MessageID %s, want %s", got, want)
	}
	if got := MessageIDSum("pair1", &u).String(); got != want {
		t.Fatalf("MessageIDSum's String %s, want %s", got, want)
	}
}
