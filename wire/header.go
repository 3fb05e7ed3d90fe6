package wire

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers the relay sets on every update (unless configured with
// noHeaders), so a consumer can filter on quality and time without
// decoding the payload.
const (
	HeaderQuality    = "Apb-Quality"     // Good, Uncertain or Bad
	HeaderStatus     = "Apb-Status"      // the status code, 0x80340000
	HeaderSourceTime = "Apb-Source-Time" // RFC 3339 with nanoseconds, UTC
	HeaderServerTime = "Apb-Server-Time"
	HeaderSeq        = "Apb-Seq"     // the per-tag sequence number
	HeaderRefresh    = "Apb-Refresh" // "true" inside a snapshot refresh
	// HeaderEpoch names the sequence Apb-Seq numbers: the relay's start
	// (Unix milliseconds, decimal). A new value means a new sequence
	// began, from 1 (the relay restarted, or a successor took over):
	// a consumer tells a restart from a loss by it.
	HeaderEpoch = "Apb-Epoch"
)

// Headers a relay of a fleet adds to every update (unless configured with
// noHeaders).
const (
	// HeaderLease is the lease's fencing token: the revision at which the
	// publishing relay won the source's lease. A later owner's token is
	// larger, so a consumer can drop an update whose token is below the
	// largest it has seen for the source.
	HeaderLease = "Apb-Lease"
	// HeaderRelay is the fleet relay ID of the publisher.
	HeaderRelay = "Apb-Relay"
)

// SetHeaders sets the update's headers on h: quality, status, sequence
// number and the timestamps that are set.
func SetHeaders(h nats.Header, u *Update) {
	// One backing array for the values and one string for the formatted
	// ones, which the values slice: at 100,000 updates a second every
	// allocation per message counts, in CPU and in the garbage the heap
	// grows to hold.
	vals := make([]string, 5)
	var buf [96]byte
	b := appendStatus(buf[:0], u.Status)
	b = strconv.AppendUint(b, u.Seq, 10)
	seqEnd := len(b)
	if !u.SourceTime.IsZero() {
		b = u.SourceTime.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	srcEnd := len(b)
	if !u.ServerTime.IsZero() {
		b = u.ServerTime.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	all := string(b)
	set := func(i int, k, v string) {
		vals[i] = v
		h[k] = vals[i : i+1 : i+1]
	}
	set(0, HeaderQuality, u.Status.Quality().String())
	set(1, HeaderStatus, all[:statusLen])
	set(2, HeaderSeq, all[statusLen:seqEnd])
	if srcEnd > seqEnd {
		set(3, HeaderSourceTime, all[seqEnd:srcEnd])
	}
	if len(all) > srcEnd {
		set(4, HeaderServerTime, all[srcEnd:])
	}
}

// statusLen is the length of a status as appendStatus writes it.
const statusLen = len("0x00000000")
