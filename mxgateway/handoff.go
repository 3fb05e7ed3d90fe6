package mxgateway

import (
	"errors"
	"fmt"
	"time"
)

// SessionRecord is what a successor of a client needs to use a session
// the client opened and left behind (it died, or stopped without closing
// it): the gateway's session id and what the gateway said at open. Nothing
// in it is secret; the token is not part of it.
type SessionRecord struct {
	ID                string        `json:"id"`
	Gateway           string        `json:"gateway"`
	WriteUserID       int32         `json:"writeUserId"`
	Capabilities      []string      `json:"capabilities"`
	CommandTimeout    time.Duration `json:"commandTimeout"`
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
	ProtocolVersion   int32         `json:"protocolVersion"`
	// ServerHandle is the handle Register returned.
	ServerHandle int32 `json:"serverHandle"`
}

// Record returns what a successor needs to adopt the session.
func (s *Session) Record() SessionRecord {
	return SessionRecord{ID: s.id, Gateway: s.gateway, WriteUserID: s.writeUser, Capabilities: s.Capabilities(),
		CommandTimeout: s.timeout, HeartbeatInterval: s.heartbeat, ProtocolVersion: s.version, ServerHandle: s.server.Load()}
}

// Adopt returns a Session for a session another client opened on this
// gateway (its Record). It sends nothing: whether the gateway still holds
// the session shows at the first call, typically EventsAfter, which
// resumes its event stream (ErrSessionLost when the gateway forgot it,
// ErrCannotResume when it no longer holds the events).
func (c *Client) Adopt(r SessionRecord) (*Session, error) {
	if r.ID == "" {
		return nil, errors.New("mxgateway: adopt: the record has no session id")
	}
	if r.ServerHandle == 0 {
		return nil, fmt.Errorf("mxgateway: adopt session %s: the record has no server handle (never registered)", r.ID)
	}
	s := &Session{c: c, id: r.ID, gateway: r.Gateway, writeUser: r.WriteUserID, caps: map[string]bool{},
		timeout: r.CommandTimeout, heartbeat: r.HeartbeatInterval, version: r.ProtocolVersion}
	for _, cp := range r.Capabilities {
		s.caps[cp] = true
		s.capList = append(s.capList, cp)
	}
	if s.gateway == "" {
		s.gateway = c.target
	}
	s.server.Store(r.ServerHandle)
	return s, nil
}
