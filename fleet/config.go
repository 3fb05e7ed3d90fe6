package fleet

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Config is one member's view of its fleet. Every member of a fleet must
// use the same Bucket, LeaseTTL and Replicas and the same list of Pairs.
type Config struct {
	// Bucket is the KV bucket that holds the leases. Default
	// DefaultBucket.
	Bucket string
	// LeaseTTL is how long a lease outlives its last renewal: the longest
	// a dead member's pairs stay unowned. Whole seconds, 1 s to 60 s;
	// default 3 s. It is also the bucket's TTL.
	LeaseTTL time.Duration
	// RelayID names this member; unique in the fleet while it is live.
	RelayID string
	// Replicas is the bucket's replica count when this member creates it
	// (1 to 5, default 3). An existing bucket must have the same.
	Replicas int
	// Dwell is how long an owner that is no longer first in rank keeps a
	// pair before it hands it over, so that a member that flaps does not
	// move pairs back and forth. Up to 10 min; zero takes the default,
	// LeaseTTL.
	Dwell time.Duration
	// Overlap is how long a member that hands a pair over (rebalance,
	// shutdown) keeps publishing after it released the lease, so that the
	// next owner is publishing before it stops: make before break. Both
	// publish inside it (a JetStream sink stores each update once by its
	// message ID). Up to LeaseTTL; zero takes the default, DefaultOverlap,
	// or LeaseTTL if that is shorter. A negative value turns it off (break
	// before make).
	Overlap time.Duration
	// Pairs are the names of the source pairs the fleet divides.
	Pairs []string
}

// DefaultBucket is the KV bucket of a fleet that names none.
const DefaultBucket = "apbridge_fleet"

// Defaults for Config.
const (
	DefaultLeaseTTL = 3 * time.Second
	DefaultReplicas = 3
	DefaultOverlap  = time.Second
	maxLeaseTTL     = 60 * time.Second
	maxDwell        = 10 * time.Minute
)

// nameRE is what a bucket, relay ID or pair name may hold: one KV key
// token, so that it fits in "lease.<pair>" and "relay.<id>".
var nameRE = regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`)

// ValidName reports whether s can be a relay ID or a pair name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.Dwell == 0 {
		c.Dwell = c.LeaseTTL
	}
	if c.Overlap == 0 {
		c.Overlap = min(DefaultOverlap, c.LeaseTTL)
	}
	return c
}

// Validate checks c (with its defaults applied) and reports every problem,
// each naming its field and the allowed values.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !nameRE.MatchString(c.Bucket) {
		add("bucket: %q is not valid (letters, digits, '-', '_', '=')", c.Bucket)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL > maxLeaseTTL || c.LeaseTTL%time.Second != 0 {
		add("leaseTTL: %v is not valid (whole seconds from 1s to %v: the bucket's TTL has 1 s granularity)", c.LeaseTTL, maxLeaseTTL)
	}
	if c.RelayID == "" {
		add("relayId: required (unique in the fleet)")
	} else if !nameRE.MatchString(c.RelayID) {
		add("relayId: %q is not valid (letters, digits, '-', '_', '=')", c.RelayID)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		add("replicas: %d is not valid (1 to 5)", c.Replicas)
	}
	if c.Dwell < 0 || c.Dwell > maxDwell {
		add("dwell: %v is not valid (above 0 up to %v; 0 takes the default, leaseTTL)", c.Dwell, maxDwell)
	}
	if c.Overlap > c.LeaseTTL {
		add("overlap: %v is not valid (at most leaseTTL, %v; negative turns it off)", c.Overlap, c.LeaseTTL)
	}
	seen := map[string]bool{}
	for i, p := range c.Pairs {
		switch {
		case !nameRE.MatchString(p):
			add("pairs[%d]: %q is not valid as a lease key (letters, digits, '-', '_', '=')", i, p)
		case seen[p]:
			add("pairs[%d]: %q is listed twice", i, p)
		}
		seen[p] = true
	}
	return errors.Join(errs...)
}

// overlap is Overlap, 0 when turned off.
func (c Config) overlap() time.Duration { return max(c.Overlap, 0) }

// renewEvery is the renewal period: four renewals per TTL, so that one or
// two lost in a leader election cost nothing.
func (c Config) renewEvery() time.Duration { return c.LeaseTTL / 4 }

// fenceMargin is how long before the lease can expire the owner stops
// publishing when renewals fail.
func (c Config) fenceMargin() time.Duration { return c.LeaseTTL / 4 }
