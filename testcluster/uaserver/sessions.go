package uaserver

import (
	"fmt"
	"time"

	"github.com/gopcua/opcua/ua"
)

// uaSession is an OPC UA session. Sessions live in the uaEngine, under its
// lock, with the subscriptions they own.
type uaSession struct {
	id, token  *ua.NodeID
	key        string
	name       string
	timeout    time.Duration
	nonce      []byte
	clientCert []byte
	activated  bool
	conn       *uaConn // the channel it was last activated on
	lastSeen   time.Time
	pubq       []*pubReq
	subs       map[uint32]*uaSub
	cps        map[string]*browseCP
}

// browseCP is a continuation point: the references a Browse did not
// return yet.
type browseCP struct {
	refs []*ua.ReferenceDescription
	max  int
}

func (e *uaEngine) newSession(c *uaConn, name string, timeout time.Duration, cert []byte) (*uaSession, ua.StatusCode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ua.StatusBadServerHalted
	}
	if len(e.sessions) >= maxSessions {
		return nil, ua.StatusBadTooManySessions
	}
	sess := &uaSession{
		id:         ua.NewGUIDNodeID(simNS, fmt.Sprintf("%x", randomBytes(16))),
		token:      ua.NewGUIDNodeID(0, fmt.Sprintf("%x", randomBytes(16))),
		name:       name,
		timeout:    timeout,
		nonce:      randomBytes(32),
		clientCert: cert,
		conn:       c,
		lastSeen:   time.Now(),
		subs:       make(map[uint32]*uaSub),
		cps:        make(map[string]*browseCP),
	}
	sess.key = sess.token.String()
	e.sessions[sess.key] = sess
	return sess, ua.StatusOK
}

func (e *uaEngine) activate(c *uaConn, token *ua.NodeID, sig []byte) ([]byte, ua.StatusCode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess := e.sessions[token.String()] // String is nil-safe
	if sess == nil {
		return nil, ua.StatusBadSessionIDInvalid
	}
	if err := c.sc.VerifySessionSignature(sess.clientCert, sess.nonce, sig); err != nil {
		return nil, ua.StatusBadApplicationSignatureInvalid
	}
	sess.activated = true
	if sess.conn != c {
		// The client moved the session to a new channel after losing the
		// old one: Publish requests queued on the old channel would answer
		// into the void and lose their notifications.
		sess.pubq = dropConn(sess.pubq, sess.conn)
		sess.conn = c
	}
	sess.nonce = randomBytes(32)
	sess.lastSeen = time.Now()
	return sess.nonce, ua.StatusOK
}

func (e *uaEngine) closeSession(token *ua.NodeID, deleteSubs bool) ua.StatusCode {
	e.mu.Lock()
	defer e.mu.Unlock()
	sess := e.sessions[token.String()]
	if sess == nil {
		return ua.StatusBadSessionIDInvalid
	}
	if !deleteSubs {
		// Part 4: the subscriptions outlive the session, for a
		// TransferSubscriptions, until their lifetime runs out.
		sess.pubq = nil
		delete(e.sessions, sess.key)
		return ua.StatusOK
	}
	e.deleteSessionLocked(sess)
	return ua.StatusOK
}

func (e *uaEngine) deleteSessionLocked(sess *uaSession) {
	for _, sub := range sess.subs {
		e.deleteSubLocked(sub)
	}
	sess.pubq = nil
	delete(e.sessions, sess.key)
}

// forgetSessions ends every session, keeping their subscriptions if
// keepSubs (they expire by their lifetime unless transferred).
func (e *uaEngine) forgetSessions(keepSubs bool) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.sessions)
	for _, sess := range e.sessions {
		if !keepSubs {
			e.deleteSessionLocked(sess)
			continue
		}
		sess.pubq = nil
		delete(e.sessions, sess.key)
	}
	return n
}

// session returns the activated session a request belongs to.
func (e *uaEngine) session(h *ua.RequestHeader) (*uaSession, ua.StatusCode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessionLocked(h)
}

func (e *uaEngine) sessionLocked(h *ua.RequestHeader) (*uaSession, ua.StatusCode) {
	if h == nil || h.AuthenticationToken == nil {
		return nil, ua.StatusBadSessionIDInvalid
	}
	sess := e.sessions[h.AuthenticationToken.String()]
	switch {
	case sess == nil:
		return nil, ua.StatusBadSessionIDInvalid
	case !sess.activated:
		return nil, ua.StatusBadSessionNotActivated
	}
	sess.lastSeen = time.Now()
	return sess, ua.StatusOK
}

// connClosed forgets the Publish requests that came on a closed
// connection. Sessions survive the loss of their channel until they time
// out, as the standard asks.
func (e *uaEngine) connClosed(c *uaConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, sess := range e.sessions {
		sess.pubq = dropConn(sess.pubq, c)
		if sess.conn == c {
			sess.conn = nil
		}
	}
}

func dropConn(q []*pubReq, c *uaConn) []*pubReq {
	out := q[:0]
	for _, pr := range q {
		if pr.conn != c {
			out = append(out, pr)
		}
	}
	clear(q[len(out):])
	return out
}

// expireSessions closes sessions that have been silent for longer than
// their timeout. A queued Publish request counts as activity.
func (e *uaEngine) expireSessions(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, sess := range e.sessions {
		pruneLocked(sess, now)
		if len(sess.pubq) == 0 && now.Sub(sess.lastSeen) > sess.timeout {
			e.s.log.Debug().Str("session", sess.name).Msg("uaserver: session timed out")
			e.deleteSessionLocked(sess)
		}
	}
}

// paginate returns at most max references (0: all) and keeps the rest
// behind a continuation point.
func (e *uaEngine) paginate(sess *uaSession, refs []*ua.ReferenceDescription, max uint32) *ua.BrowseResult {
	if refs == nil {
		refs = []*ua.ReferenceDescription{}
	}
	if max == 0 || len(refs) <= int(max) {
		return &ua.BrowseResult{StatusCode: ua.StatusOK, References: refs}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(sess.cps) >= maxContinuationPoints {
		return &ua.BrowseResult{StatusCode: ua.StatusBadNoContinuationPoints, References: []*ua.ReferenceDescription{}}
	}
	cp := randomBytes(8)
	sess.cps[string(cp)] = &browseCP{refs: refs[max:], max: int(max)}
	return &ua.BrowseResult{StatusCode: ua.StatusOK, ContinuationPoint: cp, References: refs[:max]}
}

// resume continues a Browse from a continuation point.
func (e *uaEngine) resume(sess *uaSession, cp []byte, release bool) *ua.BrowseResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := sess.cps[string(cp)]
	if st == nil {
		return &ua.BrowseResult{StatusCode: ua.StatusBadContinuationPointInvalid, References: []*ua.ReferenceDescription{}}
	}
	delete(sess.cps, string(cp))
	if release {
		return &ua.BrowseResult{StatusCode: ua.StatusOK, References: []*ua.ReferenceDescription{}}
	}
	if len(st.refs) <= st.max {
		return &ua.BrowseResult{StatusCode: ua.StatusOK, References: st.refs}
	}
	next := randomBytes(8)
	sess.cps[string(next)] = &browseCP{refs: st.refs[st.max:], max: st.max}
	return &ua.BrowseResult{StatusCode: ua.StatusOK, ContinuationPoint: next, References: st.refs[:st.max]}
}
