package fleet

import "time"

// Cause says why a member gained or lost a pair.
type Cause string

// Causes of ownership changes.
const (
	// CauseFree: the pair had no owner and this member ranks first among
	// the live members that could take it.
	CauseFree Cause = "free"
	// CauseHandover: another member ranks first now (it joined, or this
	// member's dwell ended) and this member handed the pair over.
	CauseHandover Cause = "handover"
	// CauseShutdown: the member closed and handed every pair over.
	CauseShutdown Cause = "shutdown"
	// CauseExpired: renewals failed for a whole TTL: the lease may have
	// expired and another member may own the pair.
	CauseExpired Cause = "expired"
	// CauseTaken: the lease holds another member's value, or a renewal
	// met a revision it did not write.
	CauseTaken Cause = "taken"
	// CauseSameID: another live member uses this member's relay ID; the
	// member gives up every pair and stops.
	CauseSameID Cause = "same-id"
)

// Event is one ownership change of this member.
type Event struct {
	Pair string
	// Owned is true when the member won the pair, false when it lost it.
	Owned bool
	// Token is the lease's fencing token: the revision at which this
	// member won it. Later owners have larger tokens.
	Token uint64
	Cause Cause
	At    time.Time
}

// Stats are a member's counters.
type Stats struct {
	// Owned is how many pairs the member owns now.
	Owned int
	// Gained and Lost count ownership changes since Join.
	Gained, Lost uint64
	// Handovers counts pairs handed over (rebalance and shutdown).
	Handovers uint64
	// RenewFailures counts renewals that failed without losing the lease.
	RenewFailures uint64
	// Live is how many members the bucket shows live, this one included.
	Live int
}
