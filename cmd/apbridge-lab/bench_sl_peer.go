package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apbridge/apbridge/internal/ctxtime"
	"github.com/apbridge/apbridge/servicelevel"
)

// The late peer is the order a real redundant pair often shows when its
// primary goes away: the primary announces ServiceLevel 0 while its
// partner still reports a Warm standby's 90, and the partner notices and
// promotes itself a moment later. The Pair sees the standby's level on
// its live session and takes the rise as an input (docs/servicelevel.md,
// rule 12), so the rise itself must move the data: switch_after_rise_ms,
// from the rise to the first Good value from the backup, is the standby's
// next health cycle (one heartbeat interval at most), the probe (a Read on
// the live session) and the promotion. Before that rule the relay stayed
// on the server in Maintenance until the window's next probe, 10 s after
// the 0.
//
// sl-late-peer-control is the same without the rise: the standby stays at
// 90, the run is watched through the degraded window after the 0 and past
// the probe at its end, and it must not switch. It is a scenario of its
// own rather than a flag of sl-late-peer, as sl-long-blip is beside
// sl-blip: one command runs both on the same build and machine, and the
// control's line cannot be taken for the switch's.
var (
	slLatePeer        = slFault{levels: [2]byte{250, 90}, stays: true, hit: latePeerHit(true)}
	slLatePeerControl = slFault{levels: [2]byte{250, 90}, stays: true, watch: true, hit: latePeerHit(false)}
)

// slControlWatch is how long the control is watched after the 0: the
// degraded window of the Pair (the bench's Pair runs with the default),
// at whose end the standby is probed again, and a second for that
// probe's answer.
const slControlWatch = time.Duration(servicelevel.DefaultDegradedWindowSeconds)*time.Second + time.Second

// latePeerHit drops the primary to ServiceLevel 0, the standby still at
// 90; with rise it raises the standby to 250 cfg.delay later, otherwise
// it waits out slControlWatch. The script is over when it returns.
func latePeerHit(rise bool) slHit {
	return func(ctx context.Context, t slTarget, cfg benchConfig, rec *slRecorder) (<-chan struct{}, error) {
		if err := t.setLevel(ctx, servicelevel.Primary, 0); err != nil {
			return nil, fmt.Errorf("the primary's ServiceLevel 0: %w", err)
		}
		// The script's own timing, not a wait for a condition: the
		// partner rises when it rises.
		wait := cfg.delay
		if !rise {
			wait = slControlWatch
		}
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return nil, err
		}
		if rise {
			rec.risen(time.Now())
			if err := t.setLevel(ctx, servicelevel.Backup, 250); err != nil {
				return nil, fmt.Errorf("the standby's rise to 250: %w", err)
			}
		}
		return closed(), nil
	}
}

// setPeerFields reports the late-peer scenarios' own fields: the stays
// (the 0's probe finding 90, and in the control the window's too) show
// that the Pair saw the events in the script's order; afterRise holds
// each run's switch_after_rise_ms.
func setPeerFields(r *result, cfg benchConfig, f slFault, afterRise []float64, stays int) {
	r.set("stays", stays)
	if f.watch {
		r.set("watch_ms", ms(slControlWatch))
		return
	}
	r.set("delay_ms", ms(cfg.delay))
	if len(afterRise) > 0 {
		r.set("switch_after_rise_ms_p50", percentile(afterRise, 50))
		r.set("switch_after_rise_ms_p99", percentile(afterRise, 99))
		r.set("switch_after_rise_ms_max", slices.Max(afterRise))
	}
}

// peerNote is the late-peer part of a run's progress line.
func (o slOutcome) peerNote(f slFault) string {
	if !f.stays {
		return ""
	}
	s := fmt.Sprintf(", stays %d", o.stays)
	if o.afterRise > 0 {
		s += fmt.Sprintf(", %.3f ms after the rise", ms(o.afterRise))
	}
	return s
}
