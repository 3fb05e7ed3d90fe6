package uaclient

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gopcua/opcua/ua"
)

// The selection steps of partner discovery, without I/O: which partners
// a server names, which discovery URLs FindServers gives one, which
// endpoint becomes the backup.

func TestPartnerURIs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		info     ServerInfo
		want     []string
		from     string
		whyParts []string
	}{
		{"ServerUriArray with itself", ServerInfo{ApplicationURI: "urn:a", ServerURIs: []string{"urn:a", "urn:b"}},
			[]string{"urn:b"}, "ServerUriArray", nil},
		{"ServerUriArray without itself", ServerInfo{ApplicationURI: "urn:a", ServerURIs: []string{"urn:b"}},
			[]string{"urn:b"}, "ServerUriArray", nil},
		{"ServerUriArray first, ServerArray ignored", ServerInfo{ApplicationURI: "urn:a", ServerURIs: []string{"urn:a", "urn:b"},
			ServerArray: []string{"urn:a", "urn:c"}}, []string{"urn:b"}, "ServerUriArray", nil},
		{"a set of three, in order, once each", ServerInfo{ApplicationURI: "urn:a", ServerURIs: []string{"urn:c", "urn:a", " urn:b ", "urn:c", ""}},
			[]string{"urn:c", "urn:b"}, "ServerUriArray", nil},
		{"only ServerArray (no ServerUriArray)", ServerInfo{ApplicationURI: "urn:a", ServerArray: []string{"urn:a", "urn:b"}},
			[]string{"urn:b"}, "ServerArray", nil},
		{"ServerUriArray of itself alone falls back to ServerArray", ServerInfo{ApplicationURI: "urn:a", ServerURIs: []string{"urn:a"},
			ServerArray: []string{"urn:a", "urn:b"}}, []string{"urn:b"}, "ServerArray", nil},
		{"ServerArray's first entry is the server's own", ServerInfo{ApplicationURI: "", ServerArray: []string{"urn:self", "urn:b"}},
			[]string{"urn:b"}, "ServerArray", nil},
		{"no partner: ServerArray of itself", ServerInfo{ApplicationURI: "urn:a", ServerArray: []string{"urn:a"}},
			nil, "", []string{"names no partner", "ServerUriArray (i=11314) (absent)", "ServerArray (i=2254) [urn:a]", "ApplicationUri urn:a"}},
		{"no partner: nothing read", ServerInfo{},
			nil, "", []string{"names no partner", "(absent)", "could not be read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, why := partnerURIs(tc.info)
			if !slices.Equal(got, tc.want) || from != tc.from {
				t.Fatalf("partners %q from %q (%s), want %q from %q", got, from, why, tc.want, tc.from)
			}
			for _, w := range tc.whyParts {
				if !strings.Contains(why, w) {
					t.Errorf("why %q lacks %q", why, w)
				}
			}
			if len(tc.whyParts) == 0 && why != "" {
				t.Errorf("why %q with partners", why)
			}
		})
	}
}

func TestPartnerDiscoveryURLs(t *testing.T) {
	const configured = "opc.tcp://127.0.0.1:4840"
	desc := func(uri string, typ ua.ApplicationType, urls ...string) *ua.ApplicationDescription {
		return &ua.ApplicationDescription{ApplicationURI: uri, ApplicationType: typ, DiscoveryURLs: urls}
	}
	self := desc("urn:a", ua.ApplicationTypeServer, configured)
	for _, tc := range []struct {
		name    string
		servers []*ua.ApplicationDescription
		want    []string
		why     string
	}{
		{"the partner", []*ua.ApplicationDescription{desc("urn:b", ua.ApplicationTypeServer, "opc.tcp://plant-b:4840")},
			[]string{"opc.tcp://plant-b:4840"}, ""},
		{"a filter the server ignores", []*ua.ApplicationDescription{self, nil, desc("urn:b", ua.ApplicationTypeClientAndServer, "opc.tcp://plant-b:4840")},
			[]string{"opc.tcp://plant-b:4840"}, ""},
		{"other transports left out", []*ua.ApplicationDescription{desc("urn:b", ua.ApplicationTypeServer,
			"https://plant-b/discovery", "opc.tcp://plant-b:4841", "opc.wss://plant-b:443")}, []string{"opc.tcp://plant-b:4841"}, ""},
		{"unknown to the server", []*ua.ApplicationDescription{self},
			nil, "FindServers on " + configured + " does not know partner urn:b (it answers with [urn:a])"},
		{"an empty answer", nil,
			nil, "does not know partner urn:b (it answers with (absent))"},
		{"a client", []*ua.ApplicationDescription{desc("urn:b", ua.ApplicationTypeClient, "opc.tcp://plant-b:4840")},
			nil, "describes partner urn:b as a client"},
		{"no discovery URL", []*ua.ApplicationDescription{desc("urn:b", ua.ApplicationTypeServer)},
			nil, "gives partner urn:b no discovery URL to use (it gives (absent))"},
		{"only the configured server's host and port", []*ua.ApplicationDescription{desc("urn:b", ua.ApplicationTypeServer,
			"opc.tcp://localhost:4840/other")},
			nil, "opc.tcp://localhost:4840/other (reaches the configured server: same host and port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := partnerDiscoveryURLs(tc.servers, "urn:b", configured)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("urls %q (%s), want %q", got, why, tc.want)
			}
			if tc.why == "" && why != "" || !strings.Contains(why, tc.why) {
				t.Fatalf("why %q, want %q", why, tc.why)
			}
		})
	}
}

func TestChoosePartnerEndpoint(t *testing.T) {
	const (
		configured = "opc.tcp://127.0.0.1:4840"
		discovery  = "opc.tcp://plant-b:4840"
	)
	ep := func(url, owner string, policy string, mode ua.MessageSecurityMode) *ua.EndpointDescription {
		return &ua.EndpointDescription{EndpointURL: url, Server: &ua.ApplicationDescription{ApplicationURI: owner},
			SecurityPolicyURI: policy, SecurityMode: mode}
	}
	none := func(url, owner string) *ua.EndpointDescription {
		return ep(url, owner, ua.SecurityPolicyURINone, ua.MessageSecurityModeNone)
	}
	signed := ep("opc.tcp://plant-b:4840", "urn:b", ua.SecurityPolicyURIBasic256Sha256, ua.MessageSecurityModeSign)
	refuse := func([]*ua.EndpointDescription) (*ua.EndpointDescription, error) {
		return nil, errors.New("the server offers no endpoint with policy Basic256Sha256 and mode SignAndEncrypt")
	}
	for _, tc := range []struct {
		name string
		eps  []*ua.EndpointDescription
		sel  EndpointSelector
		want string
		why  string
	}{
		{"the partner's endpoint", []*ua.EndpointDescription{none("opc.tcp://plant-b:4840", "urn:b")}, nil, "opc.tcp://plant-b:4840", ""},
		{"the one that matches the security settings", []*ua.EndpointDescription{signed, none("opc.tcp://plant-b:4841", "urn:b")}, nil,
			"opc.tcp://plant-b:4841", ""},
		{"no URL in the endpoint: the discovery URL", []*ua.EndpointDescription{none("", "urn:b")}, nil, discovery, ""},
		{"a server that does not say whose endpoint it is", []*ua.EndpointDescription{none("opc.tcp://plant-b:4840", "")}, nil,
			"opc.tcp://plant-b:4840", ""},
		{"none matches", []*ua.EndpointDescription{signed}, nil, "",
			"GetEndpoints on opc.tcp://plant-b:4840, partner urn:b's discovery URL: the server offers no opc.tcp endpoint with security None (it offers [Basic256Sha256/Sign at opc.tcp://plant-b:4840])"},
		{"none matches the source's selection", []*ua.EndpointDescription{signed}, refuse, "", "no endpoint with policy Basic256Sha256 and mode SignAndEncrypt"},
		{"the configured server's ApplicationUri", []*ua.EndpointDescription{none("opc.tcp://plant-a2:4840", "urn:a")}, nil, "",
			"the endpoint opc.tcp://plant-a2:4840 found for partner urn:b is the configured server's own (ApplicationUri urn:a): the same server"},
		{"another server's", []*ua.EndpointDescription{none("opc.tcp://plant-c:4840", "urn:c")}, nil, "",
			"belongs to another server, urn:c"},
		{"the configured host and port", []*ua.EndpointDescription{none("opc.tcp://localhost:4840", "urn:b")}, nil, "",
			"the endpoint opc.tcp://localhost:4840 found for partner urn:b reaches the configured server (" + configured + "): same host and port"},
		{"not an opc.tcp URL", []*ua.EndpointDescription{none("opc.tcp://:4840", "urn:b")}, nil, "", "partner urn:b's endpoint cannot be used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tc.sel
			if sel == nil {
				sel = SelectNoneEndpoint
			}
			got, why := choosePartnerEndpoint(configured, "urn:a", "urn:b", discovery, tc.eps, sel)
			if got != tc.want {
				t.Fatalf("url %q (%s), want %q", got, why, tc.want)
			}
			if tc.why == "" && why != "" || !strings.Contains(why, tc.why) {
				t.Fatalf("why %q, want %q", why, tc.why)
			}
		})
	}
}

func TestDiscoverPartnerSettings(t *testing.T) {
	one := []string{"opc.tcp://plant-a:4840"}
	two := []string{"opc.tcp://plant-a:4840", "opc.tcp://plant-b:4840"}
	for _, tc := range []struct {
		name string
		cfg  PairConfig
		want string
	}{
		{"one endpoint", PairConfig{Endpoints: one, DiscoverPartner: true}, ""},
		{"two endpoints", PairConfig{Endpoints: two, DiscoverPartner: true},
			"discoverPartner: finds the backup of a source with one endpoint, and endpoints gives two"},
		{"hot with one endpoint and discovery", PairConfig{Endpoints: one, DiscoverPartner: true, Mode: ModeHot}, ""},
		{"hot with one endpoint (control)", PairConfig{Endpoints: one, Mode: ModeHot}, "mode: hot keeps the data items on a standby server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.cfg.Settings()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.want == "" && (!s.Single || !s.DiscoverPartner):
				t.Fatalf("settings %+v: want a single server that discovers its partner", s)
			}
		})
	}
}
