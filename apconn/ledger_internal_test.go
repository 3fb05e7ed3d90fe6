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
		case 2: // a multi-valued header
			m.Header["X-Many"] = []string{"one", "two", fmt.Sprint(i)}
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
	// Sent to member 1, which confirms the first 2,000: a compaction.
	for i := l.head; i < len(l.entries); i++ {
		l.entries[i].gen = 1
	}
	const confirmed = 2000
	l.confirm(1, confirmed)
	if l.head != 0 || l.len() != n-confirmed {
		t.Fatalf("after the confirmation: head %d, %d entries, want 0 and %d (compacted)", l.head, l.len(), n-confirmed)
	}
	// Twice: a replay leaves the records as they were, for the next one.
	var got nats.Msg
	for range 2 {
		for i := range l.len() {
			e := &l.entries[l.head+i]
			l.msg(e, &got)
			w := &want[confirmed+i]
			if got.Subject != w.Subject || got.Reply != w.Reply || string(got.Data) != string(w.Data) {
				t.Fatalf("entry %d: %q %q %q, want %q %q %q", i, got.Subject, got.Reply, got.Data, w.Subject, w.Reply, w.Data)
			}
			if !maps.EqualFunc(got.Header, w.Header, slices.Equal) || (got.Header == nil) != (w.Header == nil) {
				t.Fatalf("entry %d (%s): headers %v, want %v", i, w.Subject, got.Header, w.Header)
			}
		}
	}
	used := l.entries[len(l.entries)-1].hdr + l.entries[len(l.entries)-1].nhdr
	if used != len(l.hdrs) {
		t.Fatalf("the entries use %d header strings, the ledger holds %d", used, len(l.hdrs))
	}
	for i, s := range l.hdrs[len(l.hdrs):cap(l.hdrs)] {
		if s != "" {
			t.Fatalf("header string %d past the entries is %q: a dropped entry's string is kept", len(l.hdrs)+i, s)
		}
	}
	// Confirming the rest empties the ledger and its strings.
	l.confirm(1, n)
	if l.len() != 0 || len(l.hdrs) != 0 || l.bytes != 0 {
		t.Fatalf("after the last confirmation: %d entries, %d header strings, %d bytes", l.len(), len(l.hdrs), l.bytes)
	}
	for i, s := range l.hdrs[:cap(l.hdrs)] {
		if s != "" {
			t.Fatalf("header string %d is %q after every entry was dropped", i, s)
		}
	}
}
