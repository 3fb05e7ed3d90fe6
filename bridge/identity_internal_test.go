package bridge

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// TestRequesterOf: what the NATS server cannot have written is never the
// server's word, even on a relay that trusts the header.
func TestRequesterOf(t *testing.T) {
	long := strings.Repeat("é", 1000)
	cases := []struct {
		name    string
		h       nats.Header
		trusted bool
		want    requester
	}{
		{"no header", nats.Header{}, true, requester{identity: identityNone}},
		{"trusted", nats.Header{requestInfoHeader: {`{"acc":"PLANT","user":"alice","name":"ui"}`}}, true,
			requester{identityServer, "PLANT/alice"}},
		// An import that does not share its users' details: the account
		// alone; the connection name is the client's choice, never a user.
		{"trusted, account only", nats.Header{requestInfoHeader: {`{"acc":"PLANT","rtt":1000}`}}, true,
			requester{identityServer, "PLANT"}},
		{"not trusted", nats.Header{requestInfoHeader: {`{"acc":"PLANT","user":"alice"}`}}, false,
			requester{identityUnverified, "PLANT/alice"}},
		{"not trusted, name", nats.Header{requestInfoHeader: {`{"acc":"PLANT","name":"ui"}`}}, false,
			requester{identityUnverified, "PLANT/ui"}},
		// The server always writes the importer's account.
		{"trusted, no account", nats.Header{requestInfoHeader: {`{"user":"admin"}`}}, true,
			requester{identityUnverified, "admin"}},
		{"trusted, not JSON", nats.Header{requestInfoHeader: {`admin`}}, true, requester{identity: identityUnverified}},
		// The server writes one header; the client added a second.
		{"trusted, twice", nats.Header{requestInfoHeader: {`{"acc":"PLANT","user":"alice"}`, `{"acc":"PLANT","user":"admin"}`}}, true,
			requester{identity: identityUnverified}},
		{"empty value", nats.Header{requestInfoHeader: {``}}, true, requester{identity: identityUnverified}},
		{"huge claim", nats.Header{requestInfoHeader: {`{"acc":"A","user":"` + long + `"}`}}, false,
			requester{identityUnverified, truncate("A/"+long, maxClaimLen)}},
	}
	for _, c := range cases {
		if got := requesterOf(c.h, c.trusted); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := truncate("A/"+long, maxClaimLen); len(got) > maxClaimLen+len("…") || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("truncated claim %q (%d bytes)", got, len(got))
	}
}
