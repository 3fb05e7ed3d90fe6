package bridge

import (
	"sort"

	"github.com/apbridge/apbridge/wire"
)

// SourceStats are the counters of one source.
type SourceStats struct {
	Name      string `json:"name"`
	Health    Health `json:"health"`
	Tags      int    `json:"tags"`
	Good      int    `json:"good"`
	Uncertain int    `json:"uncertain"`
	Bad       int    `json:"bad"`
	NoValue   int    `json:"noValue"`
	Failed    int    `json:"failed"` // not subscribed: the last attempt failed for it
	// FailedTags names them, with the source's reason, the first
	// MaxFailedListed by name.
	FailedTags        []FailedTag `json:"failedTags,omitempty"`
	Updates           uint64      `json:"updates"`
	Published         uint64      `json:"published"`
	PublishErrors     uint64      `json:"publishErrors"`
	Unsupported       uint64      `json:"unsupported"`
	SubscribeRequests uint64      `json:"subscribeRequests"`
	SubscribeFailures uint64      `json:"subscribeFailures"`
	LostReplies       uint64      `json:"lostReplies"`
	SubscribeInFlight bool        `json:"subscribeInFlight"`
	Writes            uint64      `json:"writes"`
	WriteErrors       uint64      `json:"writeErrors"`
	Refreshes         uint64      `json:"refreshes"`
	// LinkRecoveries and Republished are a LinkReporter's counts: lost
	// links ridden out on the same session, and the notifications asked
	// for again in them.
	LinkRecoveries uint64 `json:"linkRecoveries"`
	Republished    uint64 `json:"republished"`
	// SuccessorTransfers and SuccessorFallbacks are a SuccessorReporter's
	// counts: the predecessor's subscriptions taken over at start, and
	// the takeovers that fell back to new subscriptions and a refresh.
	SuccessorTransfers uint64 `json:"successorTransfers"`
	SuccessorFallbacks uint64 `json:"successorFallbacks"`
}

// FailedTag is a tag the source could not subscribe, and why.
type FailedTag struct {
	Tag   string `json:"tag"`
	Error string `json:"error"`
}

// MaxFailedListed bounds SourceStats.FailedTags: a source whose every tag
// fails names enough of them to act on without a status reply of
// megabytes.
const MaxFailedListed = 20

// Stats returns the counters of every source.
func (b *Bridge) Stats() []SourceStats {
	b.mu.Lock()
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()
	out := make([]SourceStats, 0, len(sources))
	for _, r := range sources {
		s := SourceStats{Name: r.src.Name()}
		r.mu.Lock()
		s.Tags, s.Health = len(r.tags), r.health
		for _, ts := range r.tags {
			switch {
			case !ts.subscribed && ts.subErr != "":
				s.Failed++
				s.FailedTags = append(s.FailedTags, FailedTag{Tag: ts.cfg.Name, Error: ts.subErr})
			case !ts.have:
				s.NoValue++
			default:
				switch ts.last.Status.Quality() {
				case wire.QualityGood:
					s.Good++
				case wire.QualityUncertain:
					s.Uncertain++
				default:
					s.Bad++
				}
			}
		}
		r.mu.Unlock()
		sort.Slice(s.FailedTags, func(i, j int) bool { return s.FailedTags[i].Tag < s.FailedTags[j].Tag })
		if len(s.FailedTags) > MaxFailedListed {
			s.FailedTags = s.FailedTags[:MaxFailedListed]
		}
		r.guardMu.Lock()
		s.SubscribeInFlight = r.guard.InFlight()
		r.guardMu.Unlock()
		c := &r.counters
		s.Updates, s.Published, s.PublishErrors = c.updates.Load(), c.published.Load(), c.publishErrors.Load()
		s.Unsupported = c.unsupported.Load()
		s.SubscribeRequests, s.SubscribeFailures, s.LostReplies = c.subscribeRequests.Load(), c.subscribeFailures.Load(), c.lostReplies.Load()
		s.Writes, s.WriteErrors, s.Refreshes = c.writes.Load(), c.writeErrors.Load(), c.refreshes.Load()
		if lr, ok := r.src.(LinkReporter); ok {
			s.LinkRecoveries, s.Republished = lr.LinkRecoveries()
		}
		if sr, ok := r.src.(SuccessorReporter); ok {
			s.SuccessorTransfers, s.SuccessorFallbacks = sr.SuccessorTakeovers()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
