package uaserver

import (
	"slices"
	"testing"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

var nidServerURIs = ua.NewNumericNodeID(0, id.Server_ServerRedundancy_ServerURIArray)

// What a client checks a configured pair against: each server's
// ApplicationUri (ServerArray[0]), its RedundancySupport, and, under
// non-transparent redundancy, a ServerUriArray that names both servers.
// With RedundancySupport None the servers have no ServerUriArray: the
// control that the option reaches the address space.
func TestOPCUARedundantSetNodes(t *testing.T) {
	for _, tc := range []struct {
		mode    ua.RedundancySupport
		hasURIs bool
	}{
		{ua.RedundancySupportWarm, true},
		{ua.RedundancySupportHot, true},
		{ua.RedundancySupportNone, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			p := startPair(t, WithRedundancySupport(tc.mode), WithApplicationURIs("urn:test:a", "urn:test:b"))
			for i, s := range p.Servers() {
				res := dial(t, s.Endpoint()).read(nidServerArray, nidRedundancy, nidServerURIs)
				if uris, _ := res[0].Value.Value().([]string); len(uris) == 0 || uris[0] != []string{"urn:test:a", "urn:test:b"}[i] {
					t.Errorf("%s: ServerArray %v: the first entry must be the server's own ApplicationUri", s.Name(), res[0].Value.Value())
				}
				if v, _ := res[1].Value.Value().(int32); ua.RedundancySupport(v) != tc.mode {
					t.Errorf("%s: RedundancySupport %v, want %v", s.Name(), res[1].Value.Value(), tc.mode)
				}
				if !tc.hasURIs {
					if res[2].Status != ua.StatusBadNodeIDUnknown {
						t.Errorf("%s: ServerUriArray %v (%v) under %v, want none", s.Name(), res[2].Value, res[2].Status, tc.mode)
					}
					continue
				}
				uris, _ := res[2].Value.Value().([]string)
				if !slices.Contains(uris, "urn:test:a") || !slices.Contains(uris, "urn:test:b") {
					t.Errorf("%s: ServerUriArray %v does not name both servers", s.Name(), uris)
				}
			}
		})
	}
}

// An alias is a second endpoint of one server: a client on it reads the
// server's own ApplicationUri and level, and it closes with the pair.
func TestOPCUAAliasReachesTheSameServer(t *testing.T) {
	p := startPair(t)
	a := p.A()
	alias, px, err := a.Alias()
	if err != nil {
		t.Fatal(err)
	}
	if alias == a.Endpoint() || "opc.tcp://"+px.Addr() != alias {
		t.Fatalf("alias %s of %s (proxy %s)", alias, a.Endpoint(), px.Addr())
	}
	c := dial(t, alias)
	res := c.read(nidServerArray)
	if uris, _ := res[0].Value.Value().([]string); len(uris) == 0 || uris[0] != a.ApplicationURI() {
		t.Fatalf("through the alias: ServerArray %v, want %s first", res[0].Value.Value(), a.ApplicationURI())
	}
	a.SetLevel(LevelStandby)
	if got := c.level(); got != LevelStandby {
		t.Fatalf("through the alias: ServiceLevel %d after A's level was set to %d", got, LevelStandby)
	}
	// The control: the same read through B's endpoint names B.
	res = dial(t, p.B().Endpoint()).read(nidServerArray)
	if uris, _ := res[0].Value.Value().([]string); len(uris) == 0 || uris[0] != p.B().ApplicationURI() {
		t.Fatalf("B: ServerArray %v", res[0].Value.Value())
	}
	p.Close()
	if !refuses(t, alias) {
		t.Fatal("the alias still listens after the pair closed")
	}
	if _, _, err := a.Alias(); err != ErrPairClosed {
		t.Fatalf("Alias after Close: %v, want ErrPairClosed", err)
	}
}
