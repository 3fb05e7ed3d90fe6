package relay

import (
	"fmt"
	"sort"
	"time"

	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/fleet"
	"github.com/apbridge/apbridge/uaclient"
)

// Sizing for a takeover (docs/reliability.md, "Sizing for a takeover").
// While a relay is gone, the OPC UA server keeps what each item samples in
// the item's queue, at most queueSize values, until a successor (the relay
// started again, or a fleet's next owner) sends Publish requests again.
// An item whose queue is configured too small for the takeover window at
// its sampling interval loses its oldest values; Warnings names it.

// fleetTakeoverMargin is what a fleet's takeover takes beyond the lease
// TTL: the next owner wins the lease within a second of its expiry.
const fleetTakeoverMargin = time.Second

// takeoverWindow is how long an OPC UA source of c may go without Publish
// requests when its relay dies: the source's takeoverWindowMilliseconds
// if set, else a restart's (10 s) or, in a fleet, the lease TTL + 1 s
// when that is longer.
func takeoverWindow(fc *FleetConfig, sc SourceConfig) (time.Duration, string) {
	if v := sc.TakeoverWindowMilliseconds; v != nil {
		return time.Duration(*v) * time.Millisecond, "takeoverWindowMilliseconds"
	}
	w := time.Duration(uaclient.DefaultTakeoverWindowMilliseconds) * time.Millisecond
	why := "a restart of the relay"
	if fc != nil {
		ttl := fc.LeaseTTL
		if ttl <= 0 {
			ttl = fleet.DefaultLeaseTTL
		}
		if t := ttl + fleetTakeoverMargin; t > w {
			w, why = t, "the fleet's takeover, leaseTTL + 1s"
		}
	}
	return w, why
}

// pairConfig is sc's pair config as the relay runs it: with the takeover
// window of its fleet (fc, nil when the relay is alone) when sc does not
// set its own.
func pairConfig(fc *FleetConfig, sc SourceConfig) uaclient.PairConfig {
	pc := sc.PairConfig
	if pc.TakeoverWindowMilliseconds == nil && fc != nil {
		w, _ := takeoverWindow(fc, sc)
		ms := int(min(w/time.Millisecond, uaclient.MaxTakeoverWindowMilliseconds))
		pc.TakeoverWindowMilliseconds = &ms
	}
	return pc
}

// queueShortfall is a configured queue too small for the takeover
// window, at the fastest sampling of the tags it applies to.
type queueShortfall struct {
	field    string // the queueSize's path, e.g. sources[0].groups[1].queueSize
	size     int
	sampling time.Duration // the fastest sampling it applies to
	tag      string        // a tag sampled that fast
	tags     int           // tags it falls short for
}

// sizingWarnings reports what is valid but loses data in a takeover: an OPC UA
// source's item queue configured too small to hold the takeover window at
// the item's sampling interval (QueueSizeFor). An unset queueSize is
// sized by the relay and never warned about. Each warning names the
// queueSize field, the takeover window and the value needed; one warning
// per configured field, for the fastest tag it applies to.
func sizingWarnings(c *Config) []string {
	var out []string
	for i, sc := range c.Sources {
		if sc.Type != "" && sc.Type != TypeOPCUA {
			continue
		}
		set, err := sc.PairConfig.Settings()
		if err != nil {
			continue // Validate reports it
		}
		f := fmt.Sprintf("sources[%d]", i)
		window, why := takeoverWindow(c.Fleet, sc)
		base := opcuasource.Monitoring{QueueSize: sc.QueueSize}
		short := map[string]*queueShortfall{}
		note := func(field string, size int, sampling time.Duration, tag string) {
			need := uaclient.QueueSizeFor(sampling, set.PublishingInterval, window)
			if uint32(size) >= need {
				return
			}
			q := short[field]
			if q == nil {
				q = &queueShortfall{field: field, size: size, sampling: sampling, tag: tag}
				short[field] = q
			}
			q.tags++
			if effectiveSampling(sampling, set.PublishingInterval) < effectiveSampling(q.sampling, set.PublishingInterval) {
				q.sampling, q.tag = sampling, tag
			}
		}
		for _, e := range sc.listedTags(f) {
			m := e.mon.Over(base)
			if m.QueueSize == nil {
				continue
			}
			note(queueField(e, sc), *m.QueueSize, tagSampling(m, set), e.tag.Name)
		}
		if sc.QueueSize != nil && len(sc.Browse) > 0 {
			// Browsed tags take the source's settings.
			note(f+".queueSize", *sc.QueueSize, set.SamplingInterval, "(browsed tags)")
		}
		fields := make([]string, 0, len(short))
		for k := range short {
			fields = append(fields, k)
		}
		sort.Strings(fields)
		for _, k := range fields {
			q := short[k]
			need := uaclient.QueueSizeFor(q.sampling, set.PublishingInterval, window)
			out = append(out, fmt.Sprintf("%s: %d holds %v of values at the %v sampling interval of tag %q (%d tag(s) of source %q); "+
				"a takeover of %v (%s) needs %d or more (or remove it: the relay sizes an unset queueSize itself)",
				q.field, q.size, uaclient.Covers(uint32(q.size), q.sampling, set.PublishingInterval),
				effectiveSampling(q.sampling, set.PublishingInterval), q.tag, q.tags, sc.Name, window, why, need))
		}
	}
	return out
}

// tagSampling is the sampling interval a tag's item asks for: its own or
// its group's (0 asks for 1 ms: opcuasource's Monitoring), else the
// source's.
func tagSampling(m opcuasource.Monitoring, set uaclient.PairSettings) time.Duration {
	if v := m.SamplingIntervalMilliseconds; v != nil {
		return max(time.Duration(*v)*time.Millisecond, time.Millisecond)
	}
	return set.SamplingInterval
}

// effectiveSampling is the sampling interval QueueSizeFor counts with.
func effectiveSampling(sampling, publishing time.Duration) time.Duration {
	if sampling <= 0 {
		return publishing
	}
	return sampling
}

// queueField is the path of the queueSize that applies to e: its own,
// its group's, or its source's.
func queueField(e tagEntry, sc SourceConfig) string {
	switch {
	case e.tag.QueueSize != nil:
		return e.field() + ".queueSize"
	case e.group >= 0 && sc.Groups[e.group].QueueSize != nil:
		return fmt.Sprintf("%s.groups[%d].queueSize", e.src, e.group)
	default:
		return e.src + ".queueSize"
	}
}
