package uaserver

import (
	"slices"

	"github.com/gopcua/opcua/ua"
)

// Discovery: every server answers FindServers (OPC UA Part 4) with its own
// description, and with its partner's once it knows one (SetPartner, or
// WithPartnerDiscovery for the pair's own servers), as a server of a
// non-transparent redundant set may, so that a client given one server
// can find the other.

// SetPartner makes the server's FindServers answer describe another
// server too: its ApplicationUri uri, reached at discoveryURLs. A test
// can name the pair's other server, a server that is not there, or
// (through an Alias) the server itself. An empty uri removes it.
func (s *Server) SetPartner(uri string, discoveryURLs ...string) {
	var d *ua.ApplicationDescription
	if uri != "" {
		d = &ua.ApplicationDescription{
			ApplicationURI:  uri,
			ProductURI:      "urn:apbridge:testcluster",
			ApplicationName: ua.NewLocalizedText("partner " + uri),
			ApplicationType: ua.ApplicationTypeServer,
			DiscoveryURLs:   append([]string{}, discoveryURLs...),
		}
	}
	s.mu.Lock()
	s.partner = d
	s.mu.Unlock()
}

// knownServers are the descriptions FindServers chooses from: the
// server's own, then its partner's.
func (s *Server) knownServers() []*ua.ApplicationDescription {
	out := []*ua.ApplicationDescription{s.appDescription()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.partner != nil {
		out = append(out, s.partner)
	}
	return out
}

func (s *Server) findServers(r *ua.FindServersRequest) ua.Response {
	servers := []*ua.ApplicationDescription{}
	for _, d := range s.knownServers() {
		if len(r.ServerURIs) == 0 || slices.Contains(r.ServerURIs, d.ApplicationURI) {
			servers = append(servers, d)
		}
	}
	return &ua.FindServersResponse{ResponseHeader: respHeader(r, ua.StatusOK), Servers: servers}
}
