package bridge

import "sort"

// SourceStats are the counters of one source.
type SourceStats struct {
	Name              string `json:"name"`
	Health            Health `json:"health"`
	Tags              int    `json:"tags"`
	Good              int    `json:"good"`
	Uncertain         int    `json:"uncertain"`
	Bad               int    `json:"bad"`
	NoValue           int    `json:"noValue"`
	Failed            int    `json:"failed"` // not subscribed: the last attempt failed for it
	Updates           uint64 `json:"updates"`
	Published         uint64 `json:"published"`
	PublishErrors     uint64 `json:"publishErrors"`
	Unsupported       uint64 `json:"unsupported"`
	SubscribeRequests uint64 `json:"subscribeRequests"`
	SubscribeFailures uint64 `json:"subscribeFailures"`
	LostReplies       uint64 `json:"lostReplies"`
	SubscribeInFlight bool   `json:"subscribeInFlight"`
	Writes            uint64 `json:"writes"`
	WriteErrors       uint64 `json:"writeErrors"`
	Refreshes         uint64 `json:"refreshes"`
}

// Stats returns the counters of every source.
func (b *Bridge) Stats() []SourceStats {
	b.mu.Lock()
	sources := append([]*runner(nil), b.sources...)
	b.mu.Unlock()
	out := make([]SourceStats, 0, len(sources))
	for _, r := range sources {
		s := SourceStats{Name: r.src.Name(), Tags: len(r.tags)}
		r.mu.Lock()
		s.Health = r.health
		for _, ts := range r.tags {
			switch {
			case !ts.subscribed && ts.subErr != "":
				s.Failed++
			case !ts.have:
				s.NoValue++
			default:
				switch ts.last.Status.Quality() {
				case QualityGood:
					s.Good++
				case QualityUncertain:
					s.Uncertain++
				default:
					s.Bad++
				}
			}
		}
		r.mu.Unlock()
		r.guardMu.Lock()
		s.SubscribeInFlight = r.guard.InFlight()
		r.guardMu.Unlock()
		c := &r.counters
		s.Updates, s.Published, s.PublishErrors = c.updates.Load(), c.published.Load(), c.publishErrors.Load()
		s.Unsupported = c.unsupported.Load()
		s.SubscribeRequests, s.SubscribeFailures, s.LostReplies = c.subscribeRequests.Load(), c.subscribeFailures.Load(), c.lostReplies.Load()
		s.Writes, s.WriteErrors, s.Refreshes = c.writes.Load(), c.writeErrors.Load(), c.refreshes.Load()
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
