package bridge

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// requestInfoHeader is where the NATS server names the sender of a
// request that crossed accounts through a service import. A client may set
// the same header itself on a request inside one account, and the server
// passes it on unchanged (natstest's TestAccountsRequestInfo shows both),
// so the header is the server's word only where the write subjects cannot
// be reached but through an import: Config.TrustRequestInfo.
const requestInfoHeader = "Nats-Request-Info"

// The identity field of the write log lines: how far the user is known.
const (
	// identityServer: the NATS server named the user (a trusted header).
	identityServer = "server"
	// identityUnverified: the request named a user the relay cannot
	// check, logged as claimed_user.
	identityUnverified = "unverified"
	// identityNone: nobody is named.
	identityNone = "none"
)

// maxClaimLen bounds a claimed user in the log: a client sets it, and
// could otherwise fill a log line with a megabyte. A server-written
// account and user (56-character keys at most) are far shorter.
const maxClaimLen = 256

// requester is who sent a write request, as far as the relay can tell.
type requester struct {
	// identity is one of the identity constants.
	identity string
	// user is "account/user" (or the account alone when the import does
	// not share its users) under identityServer, the claim under
	// identityUnverified, "" under identityNone.
	user string
}

// requesterOf reads a request's Nats-Request-Info header. trusted is
// Config.TrustRequestInfo: the header can only have come from the server.
// Even then a header without an account is a claim, since the server
// always writes the importer's account.
func requesterOf(h nats.Header, trusted bool) requester {
	raw, ok := h[requestInfoHeader]
	if !ok || len(raw) == 0 {
		return requester{identity: identityNone}
	}
	var ci struct {
		Account string `json:"acc"`
		User    string `json:"user"`
		Name    string `json:"name"`
	}
	if len(raw) > 1 || json.Unmarshal([]byte(raw[0]), &ci) != nil {
		// Two headers or not the server's JSON: not the server's.
		return requester{identity: identityUnverified}
	}
	if trusted && ci.Account != "" {
		// The connection name is the client's choice even when the server
		// writes it: the verified identity is the account and the user.
		who := ci.Account
		if ci.User != "" {
			who += "/" + ci.User
		}
		return requester{identity: identityServer, user: who}
	}
	who := ci.User
	if who == "" {
		who = ci.Name
	}
	if ci.Account != "" {
		who = ci.Account + "/" + who
	}
	return requester{identity: identityUnverified, user: truncate(who, maxClaimLen)}
}

// logTo adds who asked to a write log line: user is a name only the NATS
// server vouched for ("unknown" otherwise); a claim goes in claimed_user,
// never in user, so that a search by user finds no forged name.
func (r requester) logTo(e *zerolog.Event) *zerolog.Event {
	switch r.identity {
	case identityServer:
		return e.Str("user", r.user).Str("identity", r.identity)
	case identityUnverified:
		e = e.Str("user", "unknown")
		if r.user != "" {
			e = e.Str("claimed_user", r.user)
		}
		return e.Str("identity", r.identity)
	default:
		return e.Str("user", "unknown").Str("identity", identityNone)
	}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop the bytes of a rune the cut split.
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Requester is who sent a request to the relay's services, as far as the
// relay can tell, read from its Nats-Request-Info header as the write log
// reads it: named as the user only when the NATS server vouched for it
// (Config.TrustRequestInfo), a claim otherwise.
type Requester struct{ r requester }

// RequesterOf reads the header of a request; trusted is
// Config.TrustRequestInfo, the operator's declaration that only a service
// import reaches the subject.
func RequesterOf(h nats.Header, trusted bool) Requester {
	return Requester{requesterOf(h, trusted)}
}

// LogTo adds who asked to a log line: user (a name only the server
// vouched for, "unknown" otherwise), claimed_user and identity.
func (q Requester) LogTo(e *zerolog.Event) *zerolog.Event { return q.r.logTo(e) }

// User is the user the server vouched for, or "" when none did.
func (q Requester) User() string {
	if q.r.identity == identityServer {
		return q.r.user
	}
	return ""
}
