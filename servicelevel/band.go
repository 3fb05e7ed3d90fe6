package servicelevel

import (
	"fmt"
	"strconv"
)

// Sub-range boundaries of OPC UA Part 4 section 6.6.2.4. They are constants
// rather than magic numbers because every rule in this package is phrased in
// terms of them ("below 200", "a 0 sample").
const (
	// MaintenanceLevel means the server must not be used. OtOpcUa
	// publishes it while it stops gracefully, which is why a 0 sample skips
	// the degraded window.
	MaintenanceLevel uint8 = 0
	// NoDataLevel means the server is up but has no data yet (a booting
	// node).
	NoDataLevel uint8 = 1
	// DegradedMin is the lowest level of the Degraded band (2-199).
	DegradedMin uint8 = 2
	// HealthyMin is the lowest Healthy level. A level at or above it never
	// starts a degraded streak, which is what keeps today's 250/240 pairs
	// from ever failing over on ServiceLevel.
	HealthyMin uint8 = 200
)

// Band is the Part 4 sub-range a ServiceLevel falls in. Clients decide on
// bands, not on exact bytes, because servers only agree on the bands: one
// vendor's standby reports 90, another's 50.
type Band uint8

const (
	// BandUnknown is the band of an unreadable level: a failed read, a Bad
	// status, a value that is not a Byte, or a server that has no value.
	BandUnknown Band = iota
	// BandMaintenance is level 0.
	BandMaintenance
	// BandNoData is level 1.
	BandNoData
	// BandDegraded is levels 2-199.
	BandDegraded
	// BandHealthy is levels 200-255.
	BandHealthy
)

var bandNames = [...]string{
	BandUnknown:     "Unknown",
	BandMaintenance: "Maintenance",
	BandNoData:      "NoData",
	BandDegraded:    "Degraded",
	BandHealthy:     "Healthy",
}

// String returns the band's name as the Part 4 table spells it, for
// example "Degraded".
func (b Band) String() string {
	if int(b) < len(bandNames) {
		return bandNames[b]
	}
	return fmt.Sprintf("Band(%d)", uint8(b))
}

// BandOf classifies a ServiceLevel byte.
func BandOf(v uint8) Band {
	switch {
	case v == MaintenanceLevel:
		return BandMaintenance
	case v == NoDataLevel:
		return BandNoData
	case v < HealthyMin:
		return BandDegraded
	default:
		return BandHealthy
	}
}

// Level is one ServiceLevel sample. It can be Unknown, and Unknown is kept
// apart from every byte on purpose: an unreadable level is evidence of
// nothing, so the failover rules neither count it as degraded nor let it
// erase the last level that was read.
//
// The zero Level is Unknown.
type Level struct {
	value uint8
	known bool
}

// LevelOf returns the known level v.
func LevelOf(v uint8) Level { return Level{value: v, known: true} }

// Unknown returns the unknown level. It is the same as Level{}; the name
// makes call sites read as what they mean.
func Unknown() Level { return Level{} }

// LevelFromValue maps the result of reading ServiceLevel (i=2267) to a
// Level without tying this package to an OPC UA library: value is the
// decoded Variant value and good reports whether the read's StatusCode was
// Good. Anything but a Good uint8 is Unknown: Part 4 defines the node as a
// Byte, so a Bad or Uncertain status, a missing value (nil) or another type
// is a server that cannot tell us its health, never a level to act on.
func LevelFromValue(value any, good bool) Level {
	v, ok := value.(uint8)
	if !good || !ok {
		return Unknown()
	}
	return LevelOf(v)
}

// Known reports whether the level was read successfully.
func (l Level) Known() bool { return l.known }

// Value returns the byte and whether it is known.
func (l Level) Value() (uint8, bool) { return l.value, l.known }

// Band classifies the level; an unknown level is BandUnknown.
func (l Level) Band() Band {
	if !l.known {
		return BandUnknown
	}
	return BandOf(l.value)
}

// Healthy reports whether the level is known and at least HealthyMin. Only
// a Healthy peer is ever a ServiceLevel failover target.
func (l Level) Healthy() bool { return l.known && l.value >= HealthyMin }

// Unhealthy reports whether the level is known and below HealthyMin (the
// Maintenance, NoData and Degraded bands). This, not Band()==BandDegraded,
// is what starts a degraded streak: a server in maintenance or without
// data is worse than a degraded one. An unknown level is neither Healthy
// nor Unhealthy.
func (l Level) Unhealthy() bool { return l.known && l.value < HealthyMin }

// Maintenance reports whether the level is known and 0, the level that
// skips the degraded window.
func (l Level) Maintenance() bool { return l.known && l.value == MaintenanceLevel }

// PreferableTo reports whether a client on an endpoint at level active
// should move to a peer at level l: the peer must be Healthy and strictly
// higher. Healthy alone is not enough (a 240 secondary must never pull a
// client off a 250 primary), and higher alone is not enough (leaving a 50
// for a 90 moves the client from one standby to another).
func (l Level) PreferableTo(active Level) bool {
	if !l.Healthy() {
		return false
	}
	return !active.known || l.value > active.value
}

// String returns the byte in decimal, or "unknown".
func (l Level) String() string {
	if !l.known {
		return "unknown"
	}
	return strconv.Itoa(int(l.value))
}
