package uaclient

import (
	"fmt"
	"slices"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/gopcua/opcua/ua"
)

// phase is where a session is in its life, as the Pair's loop sees it. It
// changes only on the loop, and only along the transitions in
// phaseTransitions (see session.to): what a session may do (carry the
// data, take samples, be promoted) follows from its phase, not from flags
// set beside it.
type phase uint8

const (
	// phaseConnecting: a connect attempt is in flight.
	phaseConnecting phase = iota
	// phaseStandby: up, not carrying the data. A session the Policy wants
	// active (promotion set) passes through it as it comes up.
	phaseStandby
	// phasePromoting: up, its items being brought to Reporting; the data
	// still flows from the session it replaces.
	phasePromoting
	// phaseCutOver: its snapshot has begun, so the data path is its own;
	// the snapshot is not whole yet.
	phaseCutOver
	// phaseServing: it carries the data.
	phaseServing
	// phaseRecovering: it carries the data of a session that lost its
	// link and that it took over; the gaps are being asked for again.
	phaseRecovering
	// phaseDead: lost or closed; its goroutines are ending.
	phaseDead
)

var phaseNames = [...]string{
	phaseConnecting: "connecting",
	phaseStandby:    "standby",
	phasePromoting:  "promoting",
	phaseCutOver:    "cut over",
	phaseServing:    "serving",
	phaseRecovering: "recovering",
	phaseDead:       "dead",
}

func (ph phase) String() string {
	if int(ph) < len(phaseNames) {
		return phaseNames[ph]
	}
	return fmt.Sprintf("phase(%d)", uint8(ph))
}

// phaseTransitions lists, by phase, the phases a session may move to.
var phaseTransitions = [...][]phase{
	phaseConnecting: {phaseStandby, phaseDead},
	// A promotion starts from the standby phase; a session that took a
	// lost one over goes straight to carrying its data.
	phaseStandby: {phasePromoting, phaseRecovering, phaseDead},
	// A promotion the Policy gave up for another one ends in standby, or
	// where it began: a session promoted again while it served goes on
	// serving.
	phasePromoting: {phaseCutOver, phaseStandby, phaseServing, phaseDead},
	phaseCutOver:   {phaseServing, phaseStandby, phaseDead},
	// A session that carries the data is replaced (standby) or promoted
	// again: a new snapshot on the same session.
	phaseServing:    {phasePromoting, phaseStandby, phaseDead},
	phaseRecovering: {phaseServing, phasePromoting, phaseStandby, phaseDead},
	phaseDead:       nil,
}

// to moves s to next. A transition that phaseTransitions does not list is
// a bug of this package: it is logged as an error (and panics in the
// tests), and the move is made anyway, so that a relay goes on.
func (s *session) to(next phase) {
	if !slices.Contains(phaseTransitions[s.phase], next) {
		msg := fmt.Sprintf("uaclient: session %d on %s: no transition %s -> %s", s.id, s.ep, s.phase, next)
		if s.p.opt.strictPhases {
			panic(msg)
		}
		s.p.log.Error().Str("member", s.ep.String()).Msg(msg)
	}
	s.phase = next
}

// up reports whether s has a session on its server.
func (s *session) up() bool { return s.phase != phaseConnecting && s.phase != phaseDead }

// dead reports whether s was lost or closed.
func (s *session) dead() bool { return s.phase == phaseDead }

// promoting reports whether s is being promoted: its items made Reporting
// or its snapshot relayed.
func (s *session) promoting() bool { return s.phase == phasePromoting || s.phase == phaseCutOver }

// serves reports whether s carries the data.
func (s *session) serves() bool { return s.phase == phaseServing || s.phase == phaseRecovering }

// sessionState is s as PairStatus reports it.
func (s *session) sessionState() SessionState {
	switch s.phase {
	case phaseConnecting:
		return SessionConnecting
	case phaseDead:
		return SessionDown
	}
	return SessionUp
}

// promotion is a session's way to carrying the data: wanted by the Policy
// (set while the session connects, or at once if it is up), its items
// brought to Reporting, then its snapshot relayed batch by batch in the
// items' order, and the data changes that arrived meanwhile after it.
type promotion struct {
	cause servicelevel.Cause
	// ver is the desire version whose snapshot completes the promotion.
	ver uint64
	// The snapshot once its first batch is in (phaseCutOver): the desire
	// version being relayed, the index of the next item to relay and the
	// batches that finished ahead of it.
	snapVer uint64
	next    int
	pending map[int]evSnapshotPart
	// buffered holds the session's data changes until its snapshot is
	// whole.
	buffered []dataNote
	// firstValueAt is when the snapshot's first value went.
	firstValueAt time.Time
}

// resumption is a session that took a lost one over, until its recovery is
// reported (phaseRecovering).
type resumption struct {
	since time.Time
	// dataSeen: the data subscription has answered on the new channel.
	dataSeen bool
	// republished counts the data changes Republish gave back.
	republished int
	// recent holds the last sample delivered per item: a server may send
	// the samples of its last messages before the break again.
	recent map[uint32]*ua.DataValue
}
