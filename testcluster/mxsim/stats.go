package mxsim

import (
	"maps"
	"sync"
)

// Stats is what a gateway did since it started or since
// ResetStats: for tests that check how a client drives it, and for
// benchmarks.
type Stats struct {
	// Commands is the number of commands run to completion.
	Commands uint64
	// CommandsByKind counts them by kind: "Register", "AddItemBulk",
	// "Advise", "AdviseSupervisory", "AdviseItemBulk", "SubscribeBulk",
	// "UnAdvise", "RemoveItem", "Write", "Read", "Ping".
	CommandsByKind map[string]uint64
	// Items counts the items the bulk commands carried, by kind
	// ("AddItemBulk", "SubscribeBulk", "AdviseItemBulk"): a client that
	// resubscribes everything, not only what failed, shows here.
	Items map[string]uint64
	// SupervisoryBulk counts the SubscribeBulk commands that advised
	// supervisory: supervisory=true on a session whose gateway advertised
	// CapBulkSubscribeSupervisory.
	SupervisoryBulk uint64
	// Dropped counts the commands never run because their caller gave up
	// (its deadline, or the command timeout) before the worker reached
	// them.
	Dropped uint64
	// DeadlineExceeded counts the Invokes that ended DEADLINE_EXCEEDED.
	DeadlineExceeded uint64
	// Cancelled counts the Invokes that ended because the client went
	// (cancelled, or its connection broke) before the reply.
	Cancelled uint64
	// Refused counts the Invokes refused RESOURCE_EXHAUSTED: MaxPending
	// commands were pending already.
	Refused uint64
	// MaxPending is the most commands pending on one session at once, the
	// running one included.
	MaxPending int
	// MaxConcurrent is the most commands running at once on one session's
	// worker. Anything but 0 or 1 would be a bug of the simulator: MXAccess
	// runs one command at a time.
	MaxConcurrent int
	// Unadvertised counts, by kind, the commands refused because the
	// gateway did not advertise them (a Ping without CapPing).
	Unadvertised map[string]uint64
	// ResumeRequests counts the StreamEvents calls that asked to resume
	// (resume_after > 0), granted or refused.
	ResumeRequests uint64
	// Faults counts the sessions faulted by an event queue overflow.
	Faults uint64
	// Sessions is the number of sessions open now.
	Sessions int
	// Advised is the number of items advised on the open sessions now.
	Advised int
}

// mxStats holds a gateway's counters; its lock is taken under every other
// lock and never held while taking one.
type mxStats struct {
	mu sync.Mutex
	s  Stats
}

func (m *mxStats) reset() {
	m.mu.Lock()
	m.s = Stats{CommandsByKind: map[string]uint64{}, Items: map[string]uint64{}, Unadvertised: map[string]uint64{}}
	m.mu.Unlock()
}

func (m *mxStats) command(kind string) {
	m.mu.Lock()
	m.s.Commands++
	m.s.CommandsByKind[kind]++
	m.mu.Unlock()
}

func (m *mxStats) items(kind string, n int) {
	m.mu.Lock()
	m.s.Items[kind] += uint64(n)
	m.mu.Unlock()
}

func (m *mxStats) add(f func(s *Stats)) {
	m.mu.Lock()
	f(&m.s)
	m.mu.Unlock()
}

func (m *mxStats) supervisoryBulk() { m.add(func(s *Stats) { s.SupervisoryBulk++ }) }
func (m *mxStats) drop()            { m.add(func(s *Stats) { s.Dropped++ }) }
func (m *mxStats) deadline()        { m.add(func(s *Stats) { s.DeadlineExceeded++ }) }
func (m *mxStats) cancel()          { m.add(func(s *Stats) { s.Cancelled++ }) }
func (m *mxStats) refuse()          { m.add(func(s *Stats) { s.Refused++ }) }
func (m *mxStats) fault()           { m.add(func(s *Stats) { s.Faults++ }) }

func (m *mxStats) pendingNow(n int) {
	m.add(func(s *Stats) { s.MaxPending = max(s.MaxPending, n) })
}

func (m *mxStats) concurrentNow(n int) {
	m.add(func(s *Stats) { s.MaxConcurrent = max(s.MaxConcurrent, n) })
}

// Stats returns the gateway's counters. The map is the caller's.
func (g *Gateway) Stats() Stats {
	g.stats.mu.Lock()
	st := g.stats.s
	st.CommandsByKind = maps.Clone(st.CommandsByKind)
	st.Items = maps.Clone(st.Items)
	st.Unadvertised = maps.Clone(st.Unadvertised)
	g.stats.mu.Unlock()
	for _, s := range g.openSessions() {
		s.mu.Lock()
		if s.ended == mxOpen {
			st.Sessions++
			for _, it := range s.items {
				if it.advise != mxNotAdvised {
					st.Advised++
				}
			}
		}
		s.mu.Unlock()
	}
	return st
}

// ResetStats sets the counters to zero. Sessions and Advised describe the
// present and are not counters.
func (g *Gateway) ResetStats() { g.stats.reset() }
