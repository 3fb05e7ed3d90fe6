// Package ldm holds what an active/passive NATS connection needs to act on
// a broker's lame-duck mode (LDM): the LameDuckHandling setting and the
// off-callback Executor that nats.go handlers hand their work to.
//
// A broker in lame-duck mode announces it at once (an async INFO with
// "ldm":true) and evicts its clients after a grace period. nats.go only
// calls a handler; what to do about the notice is decided by the
// LameDuckHandling value, and the work itself runs on an Executor because a
// nats.go handler must never block: every handler of a connection shares
// one callback goroutine.
package ldm

import (
	"fmt"
	"strings"
)

// LameDuckHandling says what an active/passive connection does when one of
// its brokers announces lame-duck mode.
//
// The zero value is None. Config files and flags use the names returned by
// String (NONE, SWITCH_TO_PASSIVE, PASSIVE_ONLY); Parse also accepts lower
// case and dashes.
type LameDuckHandling int

const (
	// None takes no action on the notice: the connection rides the broker
	// until it is evicted at the end of the grace period. This is plain
	// nats.go behaviour and the baseline the other values are measured
	// against.
	None LameDuckHandling = iota
	// SwitchToPassive promotes the warm passive connection as soon as the
	// active's broker announces LDM, then arms a fresh passive on a healthy
	// broker. A passive whose broker announces LDM is re-homed; the active
	// does not move.
	SwitchToPassive
	// PassiveOnly re-homes a passive whose broker announces LDM, but lets
	// the active ride its broker to eviction before the passive is promoted.
	PassiveOnly
)

// Default is the handling used when a configuration does not name one. A
// user who runs an active/passive pair has paid for a warm standby to make
// planned maintenance fast; leaving it idle during LDM would waste it.
const Default = SwitchToPassive

var names = [...]string{
	None:            "NONE",
	SwitchToPassive: "SWITCH_TO_PASSIVE",
	PassiveOnly:     "PASSIVE_ONLY",
}

// Values returns every valid LameDuckHandling, in declaration order.
func Values() []LameDuckHandling {
	return []LameDuckHandling{None, SwitchToPassive, PassiveOnly}
}

// String returns the canonical name, for example "SWITCH_TO_PASSIVE".
func (h LameDuckHandling) String() string {
	if h.Valid() {
		return names[h]
	}
	return fmt.Sprintf("LameDuckHandling(%d)", int(h))
}

// Valid reports whether h is one of the declared values.
func (h LameDuckHandling) Valid() bool {
	return h >= None && int(h) < len(names)
}

// ActsOnPassive reports whether a passive whose broker enters LDM is
// re-homed before it is evicted.
func (h LameDuckHandling) ActsOnPassive() bool {
	return h == SwitchToPassive || h == PassiveOnly
}

// ActsOnActive reports whether the active is switched to the passive as soon
// as its broker announces LDM, instead of riding it to eviction.
func (h LameDuckHandling) ActsOnActive() bool {
	return h == SwitchToPassive
}

// ParseError is returned by Parse for a name that is not a LameDuckHandling.
type ParseError struct {
	Input string
}

func (e *ParseError) Error() string {
	valid := make([]string, len(names))
	copy(valid, names[:])
	return fmt.Sprintf("ldm: unknown lame-duck handling %q (valid: %s)", e.Input, strings.Join(valid, ", "))
}

// Parse returns the LameDuckHandling named s. Matching ignores case and
// treats '-' like '_', so "switch-to-passive" is SwitchToPassive. An unknown
// name returns a *ParseError that lists the valid names.
func Parse(s string) (LameDuckHandling, error) {
	norm := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	for i, n := range names {
		if n == norm {
			return LameDuckHandling(i), nil
		}
	}
	return None, &ParseError{Input: s}
}

// MarshalText implements encoding.TextMarshaler, so a LameDuckHandling is
// written by name in JSON and YAML.
func (h LameDuckHandling) MarshalText() ([]byte, error) {
	if !h.Valid() {
		return nil, fmt.Errorf("ldm: cannot marshal invalid %s", h)
	}
	return []byte(h.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with the rules of Parse.
func (h *LameDuckHandling) UnmarshalText(text []byte) error {
	v, err := Parse(string(text))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// Set implements flag.Value, so a LameDuckHandling can be a command-line
// flag.
func (h *LameDuckHandling) Set(s string) error { return h.UnmarshalText([]byte(s)) }

// Type names the flag value type for flag libraries that ask for it.
func (h *LameDuckHandling) Type() string { return "lameDuckHandling" }
