package uaserver

import (
	"fmt"
	"math"
	"time"

	"github.com/gopcua/opcua/ua"
)

// SimNamespaceURI is the namespace of the simulated tags. It has namespace
// index 1 on both servers of a pair, so a tag has the same NodeID on both.
const SimNamespaceURI = "urn:apbridge:testcluster:sim"

// simNS is the namespace index of SimNamespaceURI.
const simNS = 1

// TagKind is the signal a simulated tag carries.
type TagKind int

const (
	// TagCounter is an Int64 equal to the tick number: k at tick k. Two
	// consecutive notifications of a counter differ by one unless updates
	// were lost, which is how a consumer detects loss.
	TagCounter TagKind = iota
	// TagRamp is a Double that climbs 0, 1, ..., 99 one step per tick and
	// wraps. Tags are phase-shifted by their index.
	TagRamp
	// TagSine is a Double, 50 + 50*sin(2*pi*k/64), phase-shifted by index.
	TagSine
	// TagBool is a Boolean that flips every 8 ticks.
	TagBool
	// TagSetpoint is a writable Double. It changes only when a client
	// writes it; both servers serve the written value.
	TagSetpoint
)

var tagKindNames = [...]string{
	TagCounter:  "Counter",
	TagRamp:     "Ramp",
	TagSine:     "Sine",
	TagBool:     "Bool",
	TagSetpoint: "Setpoint",
}

// String returns the kind's name, which is also the prefix of its tags'
// names ("Counter0004").
func (k TagKind) String() string {
	if k >= 0 && int(k) < len(tagKindNames) {
		return tagKindNames[k]
	}
	return fmt.Sprintf("TagKind(%d)", int(k))
}

// dataType is the OPC UA built-in type of the kind's values.
func (k TagKind) dataType() uint32 {
	switch k {
	case TagCounter:
		return 8 // Int64
	case TagBool:
		return 1 // Boolean
	default:
		return 11 // Double
	}
}

// Tag is one simulated tag. Tags are the same on both servers of a pair.
type Tag struct {
	// Name is the tag's browse name and the string identifier of its
	// NodeID, for example "Counter0000" or "Setpoint0001".
	Name string
	// Kind is the signal the tag carries.
	Kind TagKind

	// index is the tag's position among the pair's generated tags, or
	// among its setpoints for a TagSetpoint.
	index int
}

// NodeID returns the tag's node, ns=1;s=<Name>, on either server. Each call
// returns a new NodeID that the caller may keep.
func (t Tag) NodeID() *ua.NodeID { return ua.NewStringNodeID(simNS, t.Name) }

// Writable reports whether clients may write the tag (setpoints only).
func (t Tag) Writable() bool { return t.Kind == TagSetpoint }

// ValueAt returns the value the tag has at tick k: int64, float64 or bool.
// Tests use it to check what a client received; a Counter's value names the
// tick it belongs to. It returns nil for setpoints, whose value is whatever
// was written.
func (t Tag) ValueAt(k uint64) any {
	i := uint64(t.index)
	switch t.Kind {
	case TagCounter:
		return int64(k)
	case TagRamp:
		return float64((k + i) % 100)
	case TagSine:
		return 50 + 50*math.Sin(2*math.Pi*float64((k+i)%64)/64)
	case TagBool:
		return ((k+i)/8)%2 == 1
	default:
		return nil
	}
}

// simTick is the state of the simulated process at one tick. It is
// immutable once published, which is what lets both servers of a pair
// serve exactly the same value and source timestamp for a tick.
type simTick struct {
	n    uint64
	at   time.Time
	vals []*ua.Variant // one per generated tag
}

func newSimTick(tags []Tag, n uint64, at time.Time) *simTick {
	t := &simTick{n: n, at: at, vals: make([]*ua.Variant, len(tags))}
	for i, tag := range tags {
		t.vals[i] = ua.MustVariant(tag.ValueAt(n))
	}
	return t
}

// setpointValue is a setpoint's value and its source timestamp.
type setpointValue struct {
	v  *ua.Variant
	at time.Time
}

// Write is one write of a setpoint that a server accepted.
type Write struct {
	// Server is the name of the server that took the write ("A" or "B").
	Server string
	// Tag is the setpoint's name.
	Tag string
	// Value is the value written.
	Value float64
	// Source is the SourceTimestamp the client sent, or when the server
	// took the write if the client sent none.
	Source time.Time
	// At is when the server took the write.
	At time.Time
}
