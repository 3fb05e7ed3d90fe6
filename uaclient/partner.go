package uaclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// Partner discovery (PairConfig.DiscoverPartner): a Pair given one
// endpoint finds its backup through that server, as OPC UA lets a client
// find the other servers of a non-transparent redundant set (Part 4
// FindServers and GetEndpoints, Part 5 ServerRedundancy):
//
//  1. the partners are the ApplicationUris of the server's
//     ServerUriArray less its own, or, where that names no other server,
//     of its ServerArray less its own (some servers list their partners
//     only there); both are read at connect, with the first ServiceLevel;
//  2. FindServers on the server, filtered to one partner's ApplicationUri,
//     gives that partner's discovery URLs;
//  3. GetEndpoints on a discovery URL gives the partner's endpoints, of
//     which the EndpointSelector takes the one that matches the security
//     settings;
//  4. the endpoint must not be the configured server itself: not its
//     host and port (as for a configured backup, SameEndpoint), not its
//     ApplicationUri.
//
// The first partner that passes every step is the backup for the Pair's
// life: the Pair runs as a pair from then on, and its backup session gets
// the same run-time check as a configured one (redundancy.go). Until then
// it runs as a single server, asking at every new session on the
// configured server and every PartnerRetryInterval while one lasts.

// PartnerRetryInterval is how long after a partner discovery that found
// nothing the next one starts, while the configured server's session
// lasts. A new session on it asks at once.
const PartnerRetryInterval = 30 * time.Second

// partnerState is the loop's partner discovery.
type partnerState struct {
	running bool      // a discovery is in flight
	next    time.Time // when the next starts, while none runs or is known
	status  PartnerStatus
}

// evPartner is a discovery's answer, from the session it ran on.
type evPartner struct {
	s   *session
	res partnerResult
}

// partnerResult is what a discovery found: the backup's URL and the
// partner's ApplicationUri, or why there is none.
type partnerResult struct {
	url, uri string
	problem  string
}

// canDiscover reports whether a partner discovery can start on s: the
// Pair looks for a partner it does not have, none is in flight, and s is
// a live session on the configured server that read what the server says
// of itself.
func (p *Pair) canDiscover(s *session) bool {
	return p.set.DiscoverPartner && p.single && !p.partner.running &&
		s != nil && s.up() && s.ep == servicelevel.Primary && s.conn.info != nil
}

// startDiscovery starts a partner discovery on s, a session on the
// configured server, if one is wanted. It runs as one of s's requests, so
// that s's client stays open until it is over.
func (p *Pair) startDiscovery(s *session, now time.Time) {
	if !p.canDiscover(s) {
		return
	}
	c := s.conn
	if !c.acquire() {
		p.partner.next = now.Add(p.opt.partnerRetry)
		return
	}
	p.partner.running = true
	p.partner.status.Attempts++
	info := *c.info
	go func() {
		defer c.release()
		c.p.post(evPartner{s: s, res: c.discoverPartner(info)})
	}()
}

// onPartner takes a discovery's answer.
func (p *Pair) onPartner(ev evPartner, now time.Time) {
	p.partner.running = false
	if !p.single {
		return
	}
	r := ev.res
	st := &p.partner.status
	if r.url != "" {
		p.urls[servicelevel.Backup] = r.url
		p.single = false
		p.pol.AddPeer()
		st.URL, st.ApplicationURI, st.Problem, st.At = r.url, r.uri, "", now
		p.standbyAt = now
		p.emit(Event{Kind: EventPartnerFound, At: now, Endpoint: servicelevel.Backup, Role: p.roleOfEndpoint(servicelevel.Backup),
			ApplicationURI: r.uri,
			Message: fmt.Sprintf("partner discovery found the backup: %s, the endpoint of partner %s of the primary (%s)",
				r.url, r.uri, p.urls[servicelevel.Primary])})
		return
	}
	if ev.s.dead() {
		// Cut short by the session's end: a session that replaced it
		// asks now, a later one when it comes up.
		p.startDiscovery(p.sess[servicelevel.Primary], now)
		return
	}
	p.partner.next = now.Add(p.opt.partnerRetry)
	st.At = now
	if r.problem == st.Problem {
		return // said already
	}
	st.Problem = r.problem
	p.emit(Event{Kind: EventPartnerNotFound, At: now, Endpoint: servicelevel.Primary, Role: p.roleOfEndpoint(servicelevel.Primary),
		Reason: r.problem, Message: fmt.Sprintf("partner discovery found no backup (%s); running as a single server, asking again in %v",
			r.problem, p.opt.partnerRetry)})
}

// discoveryDue returns when the next discovery is due, if one waits for
// its time on a live session on the configured server.
func (p *Pair) discoveryDue() (time.Time, bool) {
	if !p.canDiscover(p.sess[servicelevel.Primary]) {
		return time.Time{}, false
	}
	return p.partner.next, true
}

// discoverPartner asks the session's server for its partner and the
// partner for its endpoint, within the connect timeout. info is what the
// server said of itself at connect.
func (c *conn) discoverPartner(info ServerInfo) partnerResult {
	timeout := c.p.set.Failover.ConnectTimeout
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	uris, from, why := partnerURIs(info)
	if len(uris) == 0 {
		return partnerResult{problem: why}
	}
	var problems []string
	for _, uri := range uris {
		servers, err := c.findServers(ctx, uri)
		if err != nil {
			problems = append(problems, fmt.Sprintf("FindServers on %s for partner %s (named in its %s) failed: %v", c.url, uri, from, err))
			continue
		}
		urls, why := partnerDiscoveryURLs(servers, uri, c.url)
		if why != "" {
			problems = append(problems, why)
			continue
		}
		for _, du := range urls {
			eps, err := getEndpoints(ctx, du, timeout)
			if err != nil {
				problems = append(problems, fmt.Sprintf("GetEndpoints on %s, partner %s's discovery URL, failed: %v", du, uri, err))
				continue
			}
			url, why := choosePartnerEndpoint(c.url, info.ApplicationURI, uri, du, eps, c.p.opt.selectEndpoint)
			if why != "" {
				problems = append(problems, why)
				continue
			}
			return partnerResult{url: url, uri: uri}
		}
	}
	return partnerResult{problem: strings.Join(problems, "; ")}
}

// findServers asks the session's server, on the session's channel, for
// the description of the server uri (FindServers with a ServerUris
// filter).
func (c *conn) findServers(ctx context.Context, uri string) ([]*ua.ApplicationDescription, error) {
	req := &ua.FindServersRequest{EndpointURL: c.url, ServerURIs: []string{uri}}
	var res *ua.FindServersResponse
	err := c.client.Send(ctx, req, func(v ua.Response) error {
		r, ok := v.(*ua.FindServersResponse)
		if !ok {
			return fmt.Errorf("the answer is a %T", v)
		}
		res = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	if h := res.ResponseHeader; h != nil && h.ServiceResult != ua.StatusOK {
		return nil, h.ServiceResult
	}
	return res.Servers, nil
}

// getEndpoints asks the server at url for its endpoints, on a channel of
// its own without security (GetEndpoints needs none), whose socket is shut
// down when ctx ends.
func getEndpoints(ctx context.Context, url string, timeout time.Duration) ([]*ua.EndpointDescription, error) {
	d, release := abortingDialer(ctx, timeout)
	defer release()
	return opcua.GetEndpoints(ctx, url, opcua.Dialer(d), opcua.DialTimeout(timeout),
		opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.RequestTimeout(timeout))
}

// partnerURIs returns the ApplicationUris of the partners a server names,
// and where it names them: its ServerUriArray less itself or, when that
// names no other server, its ServerArray less its own entry (the first).
// why says, when there are none, what the server said instead.
func partnerURIs(info ServerInfo) (uris []string, from, why string) {
	others := func(list []string) []string {
		var out []string
		for _, u := range list {
			if u = strings.TrimSpace(u); u != "" && u != info.ApplicationURI && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
		return out
	}
	if uris := others(info.ServerURIs); len(uris) > 0 {
		return uris, "ServerUriArray", ""
	}
	if len(info.ServerArray) > 1 {
		if uris := others(info.ServerArray[1:]); len(uris) > 0 {
			return uris, "ServerArray", ""
		}
	}
	self := info.ApplicationURI
	if self == "" {
		self = "unknown: its ServerArray could not be read"
	}
	return nil, "", fmt.Sprintf("the server names no partner: neither its ServerUriArray (i=11314) %s nor its ServerArray (i=2254) %s "+
		"lists another server than itself (ApplicationUri %s)", listText(info.ServerURIs), listText(info.ServerArray), self)
}

// listText shows a list of URIs in a message.
func listText(l []string) string {
	if l == nil {
		return "(absent)"
	}
	return "[" + strings.Join(l, ", ") + "]"
}

// partnerDiscoveryURLs takes the description of the server uri from
// configured's FindServers answer, and returns its discovery URLs that a
// client can use: opc.tcp URLs that do not reach the configured server
// itself. why says, when there are none, which of that was missing.
func partnerDiscoveryURLs(servers []*ua.ApplicationDescription, uri, configured string) (urls []string, why string) {
	var d *ua.ApplicationDescription
	var known []string
	for _, s := range servers {
		if s == nil {
			continue
		}
		if s.ApplicationURI == uri && d == nil {
			d = s
		}
		known = append(known, s.ApplicationURI)
	}
	switch {
	case d == nil:
		return nil, fmt.Sprintf("FindServers on %s does not know partner %s (it answers with %s)", configured, uri, listText(known))
	case d.ApplicationType == ua.ApplicationTypeClient:
		return nil, fmt.Sprintf("FindServers on %s describes partner %s as a client, not a server", configured, uri)
	}
	var skipped []string
	for _, u := range d.DiscoveryURLs {
		u = strings.TrimSpace(u)
		if checkEndpointURL(u) != "" {
			skipped = append(skipped, u+" (not an opc.tcp URL)")
			continue
		}
		if same := sameServer(configured, u); same != "" {
			skipped = append(skipped, fmt.Sprintf("%s (reaches the configured server: %s)", u, same))
			continue
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, fmt.Sprintf("FindServers on %s gives partner %s no discovery URL to use (it gives %s)", configured, uri, listText(skipped))
	}
	return urls, ""
}

// choosePartnerEndpoint takes the backup's URL from what GetEndpoints on
// the discovery URL of partner uri answered: the URL of the endpoint sel
// picks (the discovery URL where the endpoint gives none), if it is
// partner uri's and not the configured server's (self its ApplicationUri,
// configured its URL). why says otherwise why none is taken.
func choosePartnerEndpoint(configured, self, uri, discoveryURL string, eps []*ua.EndpointDescription, sel EndpointSelector) (url, why string) {
	ep, err := sel(eps)
	if err != nil {
		return "", fmt.Sprintf("GetEndpoints on %s, partner %s's discovery URL: %v", discoveryURL, uri, err)
	}
	url = strings.TrimSpace(ep.EndpointURL)
	if url == "" {
		url = discoveryURL
	}
	if reason := checkEndpointURL(url); reason != "" {
		return "", fmt.Sprintf("partner %s's endpoint cannot be used: %s", uri, reason)
	}
	if ep.Server != nil {
		switch owner := ep.Server.ApplicationURI; {
		case owner == "":
		case owner == self:
			return "", fmt.Sprintf("the endpoint %s found for partner %s is the configured server's own (ApplicationUri %s): "+
				"the same server, no backup", url, uri, owner)
		case owner != uri:
			return "", fmt.Sprintf("the endpoint %s found for partner %s belongs to another server, %s", url, uri, owner)
		}
	}
	if same := sameServer(configured, url); same != "" {
		return "", fmt.Sprintf("the endpoint %s found for partner %s reaches the configured server (%s): %s, no backup",
			url, uri, configured, same)
	}
	return url, ""
}

// SelectNoneEndpoint is the default EndpointSelector: an opc.tcp
// endpoint with security policy and mode None, which the Pair's clients
// use unless given options of their own.
func SelectNoneEndpoint(eps []*ua.EndpointDescription) (*ua.EndpointDescription, error) {
	var offered []string
	for _, ep := range eps {
		if ep == nil {
			continue
		}
		if (ep.EndpointURL == "" || strings.HasPrefix(strings.ToLower(ep.EndpointURL), "opc.tcp://")) &&
			ep.SecurityPolicyURI == ua.SecurityPolicyURINone && ep.SecurityMode == ua.MessageSecurityModeNone {
			return ep, nil
		}
		offered = append(offered, strings.TrimPrefix(ep.SecurityPolicyURI, ua.SecurityPolicyURIPrefix)+"/"+
			strings.TrimPrefix(ep.SecurityMode.String(), "MessageSecurityMode")+" at "+ep.EndpointURL)
	}
	return nil, fmt.Errorf("the server offers no opc.tcp endpoint with security None (it offers %s)", listText(offered))
}
