package apconn

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestLedgerKeepsNeitherMsgNorHeaderMap publishes through the Conn's own
// path, held (no target), reusing one message and one header map for every
// publish as a hot path may, then drops the confirmed head past a
// compaction and checks that the message the ledger builds for a replay
// is, for every entry left, the one published: subject, reply, payload
// and every header value, a multi-valued header's in order, replay after
// replay. Then that the
// strings of the entries dropped are cleared (they may hold a payload).
func TestLedgerKeepsNeitherMsgNorHeaderMap(t *testing.T) {
	const n = 3000
	c := &Conn{}
	c.pub.ledger.max = 1 << 30
	want := make([]nats.Msg, n)
	m := &nats.Msg{Header: nats.Header{}}
	for i := range n {
		data := fmt.Appendf(nil, `{"seq":%d}`, i)
		clear(m.Header)
		m.Subject, m.Reply, m.Data = fmt.Sprintf("a.%d", i), "", data
		var err error
		switch i % 4 {
		case 0: // no headers
			m.Header = nil
			err = c.PublishOwned(m)
			m.Header = nats.Header{}
		case 1: // single values, one of them the payload's own text
			m.Header["Apb-Seq"] = []string{string(data[7 : len(data)-1])}
			m.Header["Apb-Quality"] = []string{"good"}
			err = c.PublishOwned(m)
		case 2: // a multi-valued header, once with more strings than a chunk holds
			m.Header["X-Many"] = []string{"one", "two", fmt.Sprint(i)}
			if i == 2502 {
				for j := range chunkHdrs {
					m.Header["X-Many"] = append(m.Header["X-Many"], fmt.Sprint(j))
				}
			}
			err = c.PublishOwned(m)
		case 3: // a reply subject, through the copying path
			m.Reply = "reply." + fmt.Sprint(i)
			m.Header["X-Copied"] = []string{fmt.Sprint(i)}
			err = c.PublishMsg(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		want[i] = nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: data, Header: maps.Clone(m.Header)}
		if len(want[i].Header) == 0 {
			want[i].Header = nil
		}
		for k, vs := range want[i].Header {
			want[i].Header[k] = slices.Clone(vs)
		}
		// The caller changes what it owns again: the ledger must not see it.
		for k := range m.Header {
			m.Header[k][0] = "changed"
		}
	}
	l := &c.pub.ledger
	// Sent to member 1, which confirms the first 2,000: chunks go.
	for _, e := range l.all() {
		e.gen = 1
	}
	const confirmed = 2000
	l.confirm(1, confirmed)
	if l.len() != n-confirmed || len(l.chunks) > (n-confirmed)/chunkEntries+3 || len(l.chunks)+len(l.free) > l.hw {
		t.Fatalf("after the confirmation: %d entries in %d chunks, %d free; want %d entries", l.len(), len(l.chunks), len(l.free), n-confirmed)
	}
	// Twice: a replay leaves the records as they were, for the next one.
	var got nats.Msg
	for range 2 {
		i := 0
		for c, e := range l.all() {
			c.msg(e, &got)
			w := &want[confirmed+i]
			if got.Subject != w.Subject || got.Reply != w.Reply || string(got.Data) != string(w.Data) {
				t.Fatalf("entry %d: %q %q %q, want %q %q %q", i, got.Subject, got.Reply, got.Data, w.Subject, w.Reply, w.Data)
			}
			if !maps.EqualFunc(got.Header, w.Header, slices.Equal) || (got.Header == nil) != (w.Header == nil) {
				t.Fatalf("entry %d (%s): headers %v, want %v", i, w.Subject, got.Header, w.Header)
			}
			i++
		}
		if i != n-confirmed {
			t.Fatalf("%d entries, want %d", i, n-confirmed)
		}
	}
	// The strings of the dropped entries in the first chunk are cleared.
	first := l.chunks[0]
	for i, s := range first.hdrs[:first.entries[first.head].hdr] {
		if s != "" {
			t.Fatalf("header string %d of a dropped entry is %q: it is kept", i, s)
		}
	}
	// Confirming the rest empties the ledger; its chunks are kept free,
	// their strings cleared, no more of them than it had in use.
	hw := l.hw
	l.confirm(1, n)
	if l.len() != 0 || len(l.chunks) != 0 || len(l.free) == 0 || len(l.free) > hw || l.bytes != 0 {
		t.Fatalf("after the last confirmation: %d entries, %d chunks, %d free of at most %d, %d bytes", l.len(), len(l.chunks), len(l.free), hw, l.bytes)
	}
	for _, c := range l.free {
		for i, s := range c.hdrs[:cap(c.hdrs)] {
			if s != "" {
				t.Fatalf("header string %d of a free chunk is %q after every entry was dropped", i, s)
			}
		}
	}
	// Confirm ticks with no publish give the free chunks back.
	ticks := 0
	for len(l.free) > 0 && ticks < 1000 {
		l.age()
		ticks++
	}
	if len(l.free) != 0 || l.hw != 0 {
		t.Fatalf("after %d confirm ticks with no publish: %d free chunks, high-water mark %d", ticks, len(l.free), l.hw)
	}
}
