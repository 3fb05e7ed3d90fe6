package wire_test

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/nats.go"
)

// A consumer reads an update from a message a relay published on a tag's
// subject: the headers to filter on, the payload for the value.
func ExampleDecodeJSON() {
	m := &nats.Msg{
		Subject: "apbridge.line1.Line1.Temp",
		Header:  nats.Header{wire.HeaderQuality: {"Good"}, wire.HeaderSeq: {"42"}},
		Data: []byte(`{"tag":"Line1.Temp","seq":42,"type":"Double","value":21.5,"quality":"Good",` +
			`"status":"0x00000000","sourceTime":"2026-11-30T08:15:30.123456789Z"}`),
	}
	if m.Header.Get(wire.HeaderQuality) != "Good" {
		return // filtered without decoding the payload
	}
	u, err := wire.DecodeJSON(m.Data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s = %v (%T), %s, seq %d, sampled %s\n",
		u.Tag, u.Value, u.Value, u.Status.Quality(), u.Seq, u.SourceTime.Format(time.RFC3339Nano))
	// Output:
	// Line1.Temp = 21.5 (float64), Good, seq 42, sampled 2026-11-30T08:15:30.123456789Z
}

// A consumer addresses a relay with its subject template and service
// prefix: here the defaults, for a relay configured without them.
func ExampleMapper() {
	m, err := wire.NewMapper(wire.DefaultSubject)
	if err != nil {
		fmt.Println(err)
		return
	}
	subject, err := m.Subject("line1", "Line1.Temp", "ns=2;s=Line1.Temp")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("updates: ", subject)
	fmt.Println("writes:  ", wire.WriteSubject(wire.DefaultPrefix, subject))
	fmt.Println("events:  ", wire.EventSubject(wire.DefaultPrefix, "line1"))
	fmt.Println("snapshot:", wire.SnapshotSubject(wire.DefaultPrefix))
	// Output:
	// updates:  apbridge.line1.Line1.Temp
	// writes:   apbridge.write.apbridge.line1.Line1.Temp
	// events:   apbridge.events.line1
	// snapshot: apbridge.snapshot
}
