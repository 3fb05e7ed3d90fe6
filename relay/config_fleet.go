package relay

import (
	"time"

	"github.com/apbridge/apbridge/fleet"
)

// FleetConfig makes the relay one of a fleet: relays that read the same
// source list and divide its sources between them through leases in a
// JetStream KV bucket (docs/fleet.md). A relay runs only the sources whose
// lease it holds. Every relay of a fleet has the same bucket, leaseTTL,
// replicas and sources, and its own relayId.
//
//	fleet:
//	  relayId: relay-a
//	  leaseTTL: 3s
type FleetConfig struct {
	// RelayID names the relay in the fleet; unique while it is live.
	RelayID string `yaml:"relayId"`
	// Bucket is the KV bucket of the leases (default "apbridge_fleet").
	Bucket string `yaml:"bucket"`
	// LeaseTTL is how long a source stays unowned when its relay dies:
	// whole seconds, 1s to 60s (default 3s). It is the bucket's TTL.
	LeaseTTL time.Duration `yaml:"leaseTTL"`
	// Replicas is the bucket's replica count (1 to 5, default 3).
	Replicas int `yaml:"replicas"`
	// Dwell is how long a relay keeps a source another relay now ranks
	// first for before handing it over (up to 10m; zero takes the
	// default, leaseTTL, and a file that writes 0 is refused).
	Dwell time.Duration `yaml:"dwell"`
	// Overlap is how long a relay that hands a source over keeps
	// publishing it while the next owner starts (make before break; the
	// JetStream sink stores each update once). Up to leaseTTL; zero takes
	// the default, 1s (or leaseTTL if shorter), and a file that writes 0
	// is refused; negative turns it off.
	Overlap time.Duration `yaml:"overlap"`
	// Handoff makes the owner of each OPC UA source record what its next
	// owner needs to take the source's data subscription over (in the
	// bucket HandoffBucket(bucket)), and the next owner take it over
	// instead of subscribing anew with a refresh (fleet_handoff.go).
	// Default (nil) true: without it a relay kill loses what the dead
	// owner had received and not stored, and what the server produced
	// until the next owner subscribed; false turns it off.
	Handoff *bool `yaml:"handoff"`
}

// HandoffEnabled reports whether the fleet keeps its OPC UA sources'
// handoffs (Handoff, default true).
func (f *FleetConfig) HandoffEnabled() bool { return f.Handoff == nil || *f.Handoff }

// fleetConfig is the fleet package's view of f for the given pairs.
func (f *FleetConfig) fleetConfig(pairs []string) fleet.Config {
	return fleet.Config{Bucket: f.Bucket, LeaseTTL: f.LeaseTTL, RelayID: f.RelayID,
		Replicas: f.Replicas, Dwell: f.Dwell, Overlap: f.Overlap, Pairs: pairs}
}

// validateFleet checks the fleet section and that every source name can be
// a lease key.
func (c *Config) validateFleet(add func(string, ...any)) {
	if c.Fleet == nil {
		return
	}
	for _, e := range Errors(c.Fleet.fleetConfig(nil).Validate()) {
		add("fleet.%v", e)
	}
	for i, s := range c.Sources {
		if s.Name != "" && !fleet.ValidName(s.Name) {
			add("sources[%d].name: %q cannot name a lease in a fleet (letters, digits, '-', '_', '=')", i, s.Name)
		}
	}
}
