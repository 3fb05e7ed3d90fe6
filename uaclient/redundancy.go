package uaclient

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// The configured pair is checked against what its servers say of
// themselves (OPC UA Part 5, the Server object), because no check of the
// URLs can tell two names of one server apart: a DNS alias, a second
// address of the host, a port forward. Each session of a pair reads its
// server's ApplicationUri, RedundancySupport and ServerUriArray once, in
// the Read of its first ServiceLevel, so that the check costs no round
// trip; the Pair compares them whenever a session comes up.

// ServerInfo is what a server says of itself and of its redundant set, as
// read when a session of a pair came up.
type ServerInfo struct {
	// ApplicationURI names the server: ServerArray[0] (i=2254), which Part
	// 5 makes the server's own ApplicationUri. "" when it could not be
	// read. (The CreateSession response carries it too, but gopcua does
	// not hand that response out.)
	ApplicationURI string
	// ServerArray is the whole ServerArray: the server's own ApplicationUri
	// first, then those of the servers it knows (a redundant set's
	// partners, where the server lists them there rather than in
	// ServerURIs). nil when it could not be read. Do not modify it.
	ServerArray []string
	// Redundancy is the server's RedundancySupport (i=3709), read only
	// when RedundancyKnown.
	Redundancy      ua.RedundancySupport
	RedundancyKnown bool
	// ServerURIs is the server's ServerUriArray (i=11314, present under
	// non-transparent redundancy): the ApplicationUris of its redundant
	// set. nil when the server has none. Do not modify it: Status shares
	// it.
	ServerURIs []string
}

// RedundancyCheck is what the Pair made of its two servers' ServerInfo.
// The zero value is a pair with nothing to report, or one not checked
// yet (Status.Servers tells which).
type RedundancyCheck struct {
	// SameServer reports that both endpoints reach one server: the
	// sessions on both report the same ApplicationUri. The pair has no
	// standby: the session on the other endpoint is not counted as one
	// (its ServiceLevel is not the standby's, for the failover rules or in
	// PairStatus.StandbyLevel). Problem says it in words.
	SameServer bool
	Problem    string
	// Warnings say why the servers may not be a redundant set, though the
	// pair works on: one reports RedundancySupport None, or their
	// ServerUriArrays do not name each other.
	Warnings []string
}

// serverInfoNodes are the nodes of ServerInfo, in the order serverInfoOf
// reads them.
func serverInfoNodes() []*ua.NodeID {
	return []*ua.NodeID{
		ua.NewNumericNodeID(0, id.Server_ServerArray),
		ua.NewNumericNodeID(0, id.Server_ServerRedundancy_RedundancySupport),
		ua.NewNumericNodeID(0, id.Server_ServerRedundancy_ServerURIArray),
	}
}

// serverInfoOf reads the values of serverInfoNodes. A node the server
// lacks or refuses leaves its field unknown: the check needs what there
// is, and a session is never refused for it.
func serverInfoOf(dvs []*ua.DataValue) ServerInfo {
	var info ServerInfo
	value := func(i int) any {
		if i >= len(dvs) || dvs[i] == nil || dvs[i].Status != ua.StatusOK || dvs[i].Value == nil {
			return nil
		}
		return dvs[i].Value.Value()
	}
	if uris, _ := value(0).([]string); len(uris) > 0 {
		info.ApplicationURI = uris[0]
		info.ServerArray = uris
	}
	// An enumeration is an Int32 on the wire; take any integer.
	switch v := value(1).(type) {
	case int32:
		info.Redundancy, info.RedundancyKnown = ua.RedundancySupport(v), v >= 0
	case uint32:
		info.Redundancy, info.RedundancyKnown = ua.RedundancySupport(v), true
	case int64:
		info.Redundancy, info.RedundancyKnown = ua.RedundancySupport(v), v >= 0
	}
	if uris, ok := value(2).([]string); ok {
		info.ServerURIs = uris
	}
	return info
}

// judgeServers checks a pair's servers: info holds what each endpoint's
// server said at its latest session, known whether it has said anything
// yet, urls the endpoints' URLs for the messages. about names, for each
// warning, the endpoint whose server it is about. It does no I/O.
func judgeServers(info [2]ServerInfo, known [2]bool, urls [2]string) (rc RedundancyCheck, about []servicelevel.Endpoint) {
	name := func(e servicelevel.Endpoint) string { return fmt.Sprintf("the %s (%s)", e, urls[e]) }
	p, b := servicelevel.Primary, servicelevel.Backup
	both := known[p] && known[b]
	if both && info[p].ApplicationURI != "" && info[p].ApplicationURI == info[b].ApplicationURI {
		rc.SameServer = true
		rc.Problem = fmt.Sprintf("%s and %s report one ApplicationUri, %s: both endpoints reach the same server "+
			"(or two servers share an ApplicationUri, which OPC UA forbids), so the pair has no standby",
			name(p), name(b), info[p].ApplicationURI)
		if info[p].Redundancy == ua.RedundancySupportTransparent && info[p].RedundancyKnown {
			rc.Problem += "; the server reports Transparent redundancy, which shows a redundant set to clients as one server: configure one endpoint"
		}
		// The rest compares two servers; there is one.
		return rc, nil
	}
	warn := func(e servicelevel.Endpoint, w string) {
		rc.Warnings = append(rc.Warnings, w)
		about = append(about, e)
	}
	for _, e := range []servicelevel.Endpoint{p, b} {
		if known[e] && info[e].RedundancyKnown && info[e].Redundancy == ua.RedundancySupportNone {
			warn(e, fmt.Sprintf("%s reports RedundancySupport None: the server does not say it is part of a redundant set", name(e)))
		}
	}
	if !both {
		return rc, about
	}
	for _, e := range []servicelevel.Endpoint{p, b} {
		peer := info[e.Other()].ApplicationURI
		// An empty list says nothing (a server without redundancy may
		// have one); only a list that leaves the peer out is a warning.
		if len(info[e].ServerURIs) == 0 || peer == "" || slices.Contains(info[e].ServerURIs, peer) {
			continue
		}
		warn(e, fmt.Sprintf("%s lists its redundant set as [%s] (ServerUriArray), without %s's ApplicationUri %s: "+
			"the two servers may not be one redundant set", name(e), strings.Join(info[e].ServerURIs, ", "), e.Other(), peer))
	}
	return rc, about
}

// checkServers takes what s's server said of itself at connect, checks
// the pair again, and reports what changed: a same-server error as an
// EventSameServer (logged as an error), a new warning as an
// EventRedundancyWarning, each once while it holds. A session that read
// nothing of its server (one of a single-server Pair) has nothing to
// check.
func (p *Pair) checkServers(s *session, now time.Time) {
	if s.conn.info == nil {
		return
	}
	p.servers[s.ep], p.serversKnown[s.ep] = *s.conn.info, true
	was := p.redundancy
	rc, about := judgeServers(p.servers, p.serversKnown, p.urls)
	p.redundancy = rc
	role := p.roleOf(s)
	switch {
	case rc.SameServer && !was.SameServer:
		// The standby's level counted until now; it no longer does. Told
		// to the Policy first, so that the event's status agrees.
		p.feed(p.pol.StandbyLevel(now, servicelevel.Unknown()))
		p.emit(Event{Kind: EventSameServer, At: now, Endpoint: s.ep, Role: role, ApplicationURI: p.servers[s.ep].ApplicationURI,
			Reason: rc.Problem, Message: "no standby: " + rc.Problem})
	case !rc.SameServer && was.SameServer:
		p.log.Info().Str("endpoint", s.conn.url).Str("member", s.ep.String()).Str("application_uri", p.servers[s.ep].ApplicationURI).
			Msg("the endpoints reach two servers again: the standby counts")
		if o := p.sess[p.pol.Active().Other()]; o != nil && o.up() && o.sampled {
			p.feed(p.pol.StandbyLevel(now, o.level))
		}
	}
	for i, w := range rc.Warnings {
		if !slices.Contains(was.Warnings, w) {
			e := about[i]
			p.emit(Event{Kind: EventRedundancyWarning, At: now, Endpoint: e, Role: p.roleOfEndpoint(e), Reason: w, Message: w})
		}
	}
	p.publishStatus()
}

// roleOfEndpoint is e's role now.
func (p *Pair) roleOfEndpoint(e servicelevel.Endpoint) Role {
	if e == p.pol.Active() {
		return RoleActive
	}
	return RoleStandby
}

// standbyLevel is l, a sample of the standby's session, as the standby's
// level: Unknown while both endpoints reach one server, since a session
// on the active's own server is no standby.
func (p *Pair) standbyLevel(l servicelevel.Level) servicelevel.Level {
	if p.redundancy.SameServer {
		return servicelevel.Unknown()
	}
	return l
}

// standbyUpText describes a standby session that came up, at level l
// (why: why it is unknown).
func (p *Pair) standbyUpText(s *session, l servicelevel.Level, why string) string {
	if p.redundancy.SameServer {
		return fmt.Sprintf("%s session up on the %s's own server (%s, %s): it is no standby",
			s.ep, s.ep.Other(), p.servers[s.ep].ApplicationURI, levelText(l, why))
	}
	return fmt.Sprintf("%s session up (standby, %s)", s.ep, levelText(l, why))
}
