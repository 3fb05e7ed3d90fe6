package servicelevel

import "time"

// The connectivity side of the Policy: connect attempts, their timing,
// lost links and refusals.

// ConnectFailed reports that the connect or switch in flight failed. After
// the retry count of consecutive failures the connection moves to the
// other endpoint whatever its level: that is the connectivity failover,
// and it does not depend on ServiceLevel.
func (p *Policy) ConnectFailed(now time.Time) Decision {
	if p.conn != connConnecting {
		return p.finish(now, Decision{})
	}
	return p.finish(now, p.attemptFailed(now))
}

// ConnectRefused reports that the connect or switch in flight was refused:
// the port answered with a reset, so nothing listens there and the server
// process is gone. That is no blip to wait out: with a Healthy standby the
// connection moves to it at once, instead of after the retry count of
// refusals; without one it counts as a failed attempt, like ConnectFailed.
func (p *Policy) ConnectRefused(now time.Time) Decision {
	if p.conn != connConnecting {
		return p.finish(now, Decision{})
	}
	if !p.single && p.standbyReady() {
		p.failed++
		return p.finish(now, p.switchTo(now, CauseRefused, p.standby))
	}
	return p.finish(now, p.attemptFailed(now))
}

// LinkLost reports that the active session died. After a last known level
// below 200 the peer is asked first, and a Healthy peer is switched to at
// once: a server that said it was degraded or going away and then went
// silent is not coming back soon. After only Healthy levels (or inside the
// dwell, or with the feature disabled) the same endpoint is retried first,
// so that a network blip on a 250 primary does not move the connection to
// a 240 secondary.
func (p *Policy) LinkLost(now time.Time) Decision {
	if p.conn != connUp {
		return p.finish(now, Decision{})
	}
	p.endStreak(now, CauseSessionEnded)
	p.waitSince = now
	if !p.proven && now.Sub(p.sessionUpAt) < p.set.ConnectTimeout {
		// An unstable session: it died before it proved itself, which
		// counts as a failed attempt, or a server that accepts sessions
		// and drops them would hold the connection forever.
		p.probe = 0
		return p.finish(now, p.attemptFailed(now))
	}
	if !p.single && p.set.Enabled && p.last.Unhealthy() && !now.Before(p.dwellUntil) {
		p.conn = connProbing
		if p.probe != 0 {
			// A probe is already out; its answer serves the lost link.
			p.probeCause = CauseLostLinkDegraded
			return p.finish(now, Decision{})
		}
		return p.finish(now, p.askProbe(now, CauseLostLinkDegraded))
	}
	p.probe = 0
	if p.blipWindow > 0 && !(p.set.Enabled && p.last.Unhealthy()) {
		// A server that was not degraded: the link may come back within
		// the time its session can be resumed in, and every retry until
		// then is worth making soon, whatever the standby reports.
		p.blipUntil = now.Add(p.blipWindow)
	}
	if p.fastRetry() {
		// With a Healthy standby to fall back on, or inside the blip
		// window, the first reconnect goes at once: a link that broke (a
		// reset, a killed server's closed socket) is either back now or
		// refuses now, and waiting the fast retry interval first only adds
		// to either. The retry count is unchanged; without the fast timing
		// (no Healthy standby and no blip window, or a server that keeps
		// failing) the connectivity failover keeps its reconnect delay.
		p.observeRetry(now, CauseLinkLost)
		return p.finish(now, p.connect(CauseReconnect))
	}
	p.wait(now, CauseLinkLost)
	return p.finish(now, Decision{})
}

func (p *Policy) connect(cause Cause) Decision {
	p.conn = connConnecting
	return Decision{
		Action:      ActionConnect,
		Cause:       cause,
		From:        p.active,
		To:          p.active,
		ActiveLevel: p.last,
		PeerLevel:   p.standby,
		DialTimeout: p.dialTimeout(),
		Attempt:     p.failed + 1,
	}
}

func (p *Policy) attemptFailed(now time.Time) Decision {
	p.failed++
	if p.failed >= p.set.RetryCount && !p.single {
		return p.switchTo(now, CauseRetriesExhausted, p.standby)
	}
	p.wait(now, CauseConnectFailed)
	return Decision{}
}

func (p *Policy) wait(now time.Time, cause Cause) {
	p.conn = connWaiting
	p.waitSince = now
	p.observeRetry(now, cause)
}

func (p *Policy) observeRetry(now time.Time, cause Cause) {
	p.observe(Observation{Kind: RetryScheduled, At: now, Endpoint: p.active, Cause: cause, Attempt: p.failed + 1, Fast: p.fastRetry(), Until: p.retryAt()})
}

// standbyReady reports whether the standby's live session is Healthy with
// the ServiceLevel failover on: a better path is proven to exist. With the
// feature off the Policy ignores every level, as the connectivity failover
// that predates ServiceLevel did.
func (p *Policy) standbyReady() bool { return p.set.Enabled && p.standby.Healthy() }

// fastRetry reports whether the next connect retry uses the short
// interval: with a Healthy standby, or when the wait began inside the blip
// window of a lost link. The slow timing is for a server that keeps
// failing, not for the first seconds of a blip.
func (p *Policy) fastRetry() bool {
	return p.standbyReady() || p.waitSince.Before(p.blipUntil)
}

func (p *Policy) retryAt() time.Time {
	if p.fastRetry() {
		return p.waitSince.Add(p.set.FastRetryInterval)
	}
	return p.waitSince.Add(p.set.ReconnectDelay)
}

// dialTimeout is short only with a Healthy standby to move to: without
// one, an attempt inside the blip window keeps the full timeout, so that a
// link down for a few seconds still connects within the attempt instead of
// using up the retry count.
func (p *Policy) dialTimeout() time.Duration {
	if p.standbyReady() {
		return p.set.FastConnectTimeout
	}
	return p.set.ConnectTimeout
}
