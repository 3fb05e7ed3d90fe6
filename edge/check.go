package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/apbridge/apbridge/bridge/jetstreamsink"
	"github.com/apbridge/apbridge/internal/jsapi"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
)

// Report is one check of an edge site: the site stream, the hub stream's
// sourcing of it, and how long a WAN outage the site can absorb.
type Report struct {
	CheckedAt time.Time  `json:"checkedAt"`
	Site      SiteReport `json:"site"`
	Hub       HubReport  `json:"hub"`
	// Unsourced is how many of the site stream's messages the hub does
	// not have yet. When the hub cannot be asked and no earlier answer
	// is known (UnsourcedKnown false), every message the site stream
	// holds counts as unsourced: the absorb time is then a lower bound.
	Unsourced      uint64 `json:"unsourced"`
	UnsourcedKnown bool   `json:"unsourcedKnown"`
	// Absorb is how long a WAN outage, from now, the site stream can ride
	// out at the current rate before a limit discards a message the hub
	// does not have (discard old) or refuses a new one (discard new), and
	// AbsorbLimit the limit that decides it (maxBytes, maxMsgs, maxAge,
	// maxMsgsPerSubject). Unbounded: no limit is reached at the current
	// rate (no traffic and no maxAge).
	Absorb        time.Duration `json:"absorbNs"`
	AbsorbSeconds float64       `json:"absorbSeconds"`
	AbsorbLimit   string        `json:"absorbLimit,omitempty"`
	Unbounded     bool          `json:"unbounded,omitempty"`
	// OutageFloor is edge.outageFloor; Warnings says what needs an
	// operator: an absorb time under the floor, the hub unreachable or
	// not sourcing the site stream.
	OutageFloor time.Duration `json:"outageFloorNs"`
	Warnings    []string      `json:"warnings,omitempty"`
}

// SiteReport is the site stream as the check saw it.
type SiteReport struct {
	Domain   string `json:"domain"`
	Stream   string `json:"stream"`
	Msgs     uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"firstSeq"`
	LastSeq  uint64 `json:"lastSeq"`
	// Subjects is how many subjects (tags) it holds.
	Subjects int `json:"subjects"`
	// The stream's limits (0: none) and discard policy.
	MaxBytes          int64         `json:"maxBytes"`
	MaxMsgs           int64         `json:"maxMsgs"`
	MaxMsgsPerSubject int64         `json:"maxMsgsPerSubject"`
	MaxAge            time.Duration `json:"maxAgeNs"`
	Discard           string        `json:"discard"`
	// FillBytes and FillMsgs are the stream's fill against maxBytes and
	// maxMsgs, 0-1 (0 without the limit).
	FillBytes float64 `json:"fillBytes"`
	FillMsgs  float64 `json:"fillMsgs"`
	// RateMsgs and RateBytes are what the stream took per second over
	// the rate window.
	RateMsgs  float64 `json:"rateMsgsPerSecond"`
	RateBytes float64 `json:"rateBytesPerSecond"`
}

// HubReport is the hub stream's sourcing of the site stream.
type HubReport struct {
	Domain string `json:"domain"`
	Stream string `json:"stream"`
	// Reachable reports an answer from the hub's JetStream across the
	// WAN now; Error says why not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Sourcing reports that the hub stream has the site stream among its
	// sources, through the site domain's API.
	Sourcing bool `json:"sourcing"`
	// Durable reports that it sources through a durable consumer of the
	// site stream. An ephemeral one is deleted by the site 10 s into an
	// outage, and nats-server only asks for a new one with a backoff that
	// grows to minutes: the catch-up starts late (docs/edge.md).
	Durable bool `json:"durable"`
	// Lag is how many site messages the hub's sourcing had still to take
	// when it last heard from the site, Active how long ago that was, and
	// SourceError the hub's error about the source.
	Lag         uint64        `json:"lag"`
	Active      time.Duration `json:"activeNs"`
	SourceError string        `json:"sourceError,omitempty"`
	// Position is the site stream sequence the hub had, as of
	// PositionAt (the last answer; an earlier one when the hub is not
	// reachable now).
	Position   uint64    `json:"position"`
	PositionAt time.Time `json:"positionAt,omitzero"`
	// CaughtUp reports that the hub was at most one second of the site's
	// traffic behind at its last contact; LastCaughtUp is when that was last seen (zero: never since
	// the relay started).
	CaughtUp     bool      `json:"caughtUp"`
	LastCaughtUp time.Time `json:"lastCaughtUp,omitzero"`
}

// Check checks the site stream and the hub stream once, on nc, a
// connection to the site's servers: the one-shot check of `apbridge edge
// status`. It returns an error only when the site stream cannot be read;
// a hub out of reach is in the report.
func Check(ctx context.Context, nc *nats.Conn, cfg Config, site Site) (Report, error) {
	return check(ctx, nc, cfg.WithDefaults(), site, nil)
}

// apiTimeout bounds each JetStream API request of a check.
const apiTimeout = 3 * time.Second

// check is Check; prev, if not nil, is the previous report, whose hub
// position stands in for the hub's while the hub cannot be asked.
func check(ctx context.Context, nc *nats.Conn, cfg Config, site Site, prev *Report) (Report, error) {
	if nc == nil {
		return Report{}, errors.New("edge: no NATS connection")
	}
	r := Report{CheckedAt: time.Now(), OutageFloor: cfg.OutageFloor,
		Site: SiteReport{Domain: site.Domain, Stream: site.Stream},
		Hub:  HubReport{Domain: cfg.Hub.Domain, Stream: cfg.Hub.Stream}}
	si, err := streamInfo(ctx, nc, site.Domain, site.Stream)
	if err != nil {
		return r, fmt.Errorf("edge: site stream %q in domain %q: %w", site.Stream, site.Domain, err)
	}
	now := si.TimeStamp // the server's clock: the stream's times are its
	if now.IsZero() {
		now = r.CheckedAt
	}
	r.Site.fill(si)
	if err := r.Site.measureRate(ctx, nc, site, si, now, cfg.RateWindow); err != nil {
		return r, fmt.Errorf("edge: site stream %q: rate: %w", site.Stream, err)
	}

	r.checkHub(ctx, nc, cfg, site, si, prev)
	r.absorb(ctx, nc, site, si, now)
	if !r.Unbounded && r.Absorb < cfg.OutageFloor {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the site stream can absorb a WAN outage of %v at the current rate (%s), less than edge.outageFloor %v",
			r.Absorb.Round(time.Second), r.AbsorbLimit, cfg.OutageFloor))
	}
	return r, nil
}

func (s *SiteReport) fill(si *api.StreamInfo) {
	c, st := si.Config, si.State
	s.Msgs, s.Bytes, s.FirstSeq, s.LastSeq, s.Subjects = st.Msgs, st.Bytes, st.FirstSeq, st.LastSeq, st.NumSubjects
	s.MaxBytes, s.MaxMsgs, s.MaxMsgsPerSubject, s.MaxAge = max(c.MaxBytes, 0), max(c.MaxMsgs, 0), max(c.MaxMsgsPer, 0), c.MaxAge
	s.Discard = "old"
	if c.Discard == api.DiscardNew {
		s.Discard = "new"
	}
	if s.MaxBytes > 0 {
		s.FillBytes = float64(st.Bytes) / float64(s.MaxBytes)
	}
	if s.MaxMsgs > 0 {
		s.FillMsgs = float64(st.Msgs) / float64(s.MaxMsgs)
	}
}

// measureRate works the rate out from the first message the stream holds
// from window ago (by the server's clock) to its last.
func (s *SiteReport) measureRate(ctx context.Context, nc *nats.Conn, site Site, si *api.StreamInfo, now time.Time, window time.Duration) error {
	if si.State.Msgs == 0 {
		return nil
	}
	from := now.Add(-window)
	span := window
	if age := now.Sub(si.Created); age < window {
		// A stream younger than the window: its whole life.
		from, span = si.Created, max(age, time.Millisecond)
	}
	m, err := getMsg(ctx, nc, site, api.JSApiMsgGetRequest{StartTime: &from})
	if isAPIError(err, errCodeNoMessageFound) {
		return nil // nothing stored in the window
	}
	if err != nil {
		return err
	}
	if m.Sequence > si.State.LastSeq {
		return nil
	}
	n := si.State.LastSeq - m.Sequence + 1
	s.RateMsgs = float64(n) / span.Seconds()
	s.RateBytes = s.RateMsgs * float64(si.State.Bytes) / float64(si.State.Msgs)
	return nil
}

// checkHub asks the hub's JetStream about the hub stream, across the leaf
// connection, and works out the hub's position in the site stream.
func (r *Report) checkHub(ctx context.Context, nc *nats.Conn, cfg Config, site Site, si *api.StreamInfo, prev *Report) {
	h := &r.Hub
	if prev != nil {
		h.Position, h.PositionAt, h.LastCaughtUp = prev.Hub.Position, prev.Hub.PositionAt, prev.Hub.LastCaughtUp
	}
	hi, err := streamInfo(ctx, nc, cfg.Hub.Domain, cfg.Hub.Stream)
	if err != nil {
		h.Error = err.Error()
		r.Warnings = append(r.Warnings, fmt.Sprintf("the hub stream %q in domain %q cannot be asked: %v", cfg.Hub.Stream, cfg.Hub.Domain, err))
	} else {
		h.Reachable = true
		prefix := apiPrefix(site.Domain)
		for _, src := range hi.Sources {
			if src == nil || src.Name != site.Stream || src.External == nil || strings.TrimSuffix(src.External.ApiPrefix, ".") != prefix {
				continue
			}
			h.Sourcing = true
			h.Lag, h.Active = src.Lag, src.Active
			h.Durable = durableSource(hi.Config.Sources, site.Stream, prefix)
			if !h.Durable {
				r.Warnings = append(r.Warnings, fmt.Sprintf("the hub stream %q sources %q through an ephemeral consumer: after an outage over 10 s its catch-up may start minutes after the WAN is back; source through a durable consumer (docs/edge.md)",
					cfg.Hub.Stream, site.Stream))
			}
			if src.Error != nil {
				h.SourceError = src.Error.Error()
				r.Warnings = append(r.Warnings, fmt.Sprintf("the hub stream %q reports an error sourcing %q: %s", cfg.Hub.Stream, site.Stream, h.SourceError))
			}
			// The hub's position does not go back: a lag the hub has not
			// updated yet (its source just restarted) is not news.
			h.Position = max(h.Position, si.State.LastSeq-min(src.Lag, si.State.LastSeq))
			h.PositionAt = r.CheckedAt
			if src.Active >= 0 {
				h.PositionAt = r.CheckedAt.Add(-src.Active)
			}
			// Under steady traffic the lag is rarely 0 at the moment it
			// is read: within a second of the site's rate counts as
			// caught up.
			h.CaughtUp = float64(src.Lag) <= max(r.Site.RateMsgs, 1)
			if h.CaughtUp {
				h.LastCaughtUp = h.PositionAt
			}
			break
		}
		if !h.Sourcing {
			r.Warnings = append(r.Warnings, fmt.Sprintf("the hub stream %q does not source %q through %s: the site's updates do not reach the hub",
				cfg.Hub.Stream, site.Stream, prefix))
		}
	}
	switch {
	case h.Position > 0 || h.Sourcing || !h.PositionAt.IsZero():
		r.Unsourced = si.State.LastSeq - min(h.Position, si.State.LastSeq)
		r.UnsourcedKnown = true
	default:
		r.Unsourced = si.State.Msgs
	}
}

// durableSource reports whether the source of stream through the API
// prefix, among the hub stream's configured sources, names a durable
// consumer.
func durableSource(sources []*api.StreamSource, stream, prefix string) bool {
	for _, c := range sources {
		if c != nil && c.Name == stream && c.External != nil && strings.TrimSuffix(c.External.ApiPrefix, ".") == prefix {
			return c.Consumer != nil && c.Consumer.Name != ""
		}
	}
	return false
}

// absorb works out how long an outage the site stream can absorb, limit by
// limit, and keeps the shortest.
func (r *Report) absorb(ctx context.Context, nc *nats.Conn, site Site, si *api.StreamInfo, now time.Time) {
	s := r.Site
	old := s.Discard == "old"
	best := time.Duration(math.MaxInt64)
	limit := ""
	consider := func(name string, d time.Duration) {
		if d < best {
			best, limit = max(d, 0), name
		}
	}
	// What the hub lacks is what a limit must not reach: with discard
	// old, the stream keeps its newest messages, so the room is the
	// limit less the unsourced part; with discard new, it refuses new
	// messages once full, so the room is what is left.
	unsourcedMsgs := min(r.Unsourced, s.Msgs)
	var unsourcedBytes float64
	if s.Msgs > 0 {
		unsourcedBytes = float64(unsourcedMsgs) * float64(s.Bytes) / float64(s.Msgs)
	}
	perSecond := func(room, rate float64) time.Duration {
		if rate <= 0 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(max(room, 0) / rate * float64(time.Second))
	}
	if s.MaxBytes > 0 {
		used := float64(s.Bytes)
		if old {
			used = unsourcedBytes
		}
		consider("maxBytes", perSecond(float64(s.MaxBytes)-used, s.RateBytes))
	}
	if s.MaxMsgs > 0 {
		used := float64(s.Msgs)
		if old {
			used = float64(unsourcedMsgs)
		}
		consider("maxMsgs", perSecond(float64(s.MaxMsgs)-used, s.RateMsgs))
	}
	if s.MaxMsgsPerSubject > 0 && s.Subjects > 0 {
		// The average subject: a tag that changes faster than the
		// others reaches the limit sooner.
		n := float64(s.Subjects)
		consider("maxMsgsPerSubject", perSecond(float64(s.MaxMsgsPerSubject)-float64(unsourcedMsgs)/n, s.RateMsgs/n))
	}
	if s.MaxAge > 0 {
		// The oldest message the hub lacks ages out first.
		var age time.Duration
		if unsourcedMsgs > 0 {
			age = r.oldestUnsourcedAge(ctx, nc, site, si, now)
		}
		consider("maxAge", s.MaxAge-age)
	}
	if limit == "" || best == time.Duration(math.MaxInt64) {
		r.Unbounded = true
		return
	}
	r.Absorb, r.AbsorbLimit = best, limit
	r.AbsorbSeconds = math.Round(best.Seconds())
}

// oldestUnsourcedAge is the age of the first site message the hub lacks;
// the age of the oldest message held when that one cannot be read.
func (r *Report) oldestUnsourcedAge(ctx context.Context, nc *nats.Conn, site Site, si *api.StreamInfo, now time.Time) time.Duration {
	oldest := now.Sub(si.State.FirstTime)
	if !r.UnsourcedKnown {
		return oldest
	}
	seq := si.State.LastSeq - r.Unsourced + 1
	m, err := getMsg(ctx, nc, site, api.JSApiMsgGetRequest{Seq: seq})
	if err != nil {
		return oldest
	}
	return now.Sub(m.Time)
}

// apiPrefix is the JetStream API prefix of domain: what a hub stream's
// source names as its external API.
func apiPrefix(domain string) string {
	return strings.TrimSuffix(jetstreamsink.APISubject(domain, "$JS.API."), ".")
}

// JetStream API error codes the check acts on.
const errCodeNoMessageFound = 10037

// streamInfo loads a stream's information from the JetStream of domain.
func streamInfo(ctx context.Context, nc *nats.Conn, domain, name string) (*api.StreamInfo, error) {
	var resp api.JSApiStreamInfoResponse
	if err := request(ctx, nc, jetstreamsink.APISubject(domain, fmt.Sprintf(api.JSApiStreamInfoT, name)), nil, &resp, &resp.JSApiResponse); err != nil {
		return nil, err
	}
	if resp.StreamInfo == nil {
		return nil, fmt.Errorf("stream info of %q: empty reply", name)
	}
	return resp.StreamInfo, nil
}

// getMsg reads one message of the site stream.
func getMsg(ctx context.Context, nc *nats.Conn, site Site, req api.JSApiMsgGetRequest) (*api.StoredMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var resp api.JSApiMsgGetResponse
	if err := request(ctx, nc, jetstreamsink.APISubject(site.Domain, fmt.Sprintf(api.JSApiMsgGetT, site.Stream)), body, &resp, &resp.JSApiResponse); err != nil {
		return nil, err
	}
	if resp.Message == nil {
		return nil, errors.New("message get: empty reply")
	}
	return resp.Message, nil
}

// request sends one JetStream API request, bounded by apiTimeout, and
// decodes the reply into resp; base is resp's embedded JSApiResponse,
// whose error it returns.
func request(ctx context.Context, nc *nats.Conn, subject string, body []byte, resp any, base *api.JSApiResponse) error {
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return jsapi.Request(rctx, nc, subject, body, resp, base)
}

func isAPIError(err error, code uint16) bool {
	var e *api.ApiError
	return errors.As(err, &e) && e.ErrCode == code
}
