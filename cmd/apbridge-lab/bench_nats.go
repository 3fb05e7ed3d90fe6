package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

func natsScenarios() []scenario {
	return []scenario{
		{"ldm-none", "NONE: the active rides its lame-duck broker to eviction (the baseline)",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, ldmApConn(ldm.None), faultActiveLDM)
			}},
		{"ldm-forcereconnect", "plain nats.go calling ForceReconnect in its LDM handler (the peer to beat)",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, plainForceReconnect, faultActiveLDM)
			}},
		{"ldm-switch", "SWITCH_TO_PASSIVE: the active's broker goes lame-duck",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, ldmApConn(ldm.SwitchToPassive), faultActiveLDM)
			}},
		{"ldm-switch-fast", "SWITCH_TO_PASSIVE with WithFastCutover: a bounded publish hold, not a round trip to the old broker",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, ldmApConn(ldm.SwitchToPassive, apconn.WithFastCutover()), faultActiveLDM)
			}},
		{"ldm-passive", "SWITCH_TO_PASSIVE: the passive's broker goes lame-duck (re-home)",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, ldmApConn(ldm.SwitchToPassive), faultPassiveLDM)
			}},
		{"kill-active", "SWITCH_TO_PASSIVE: the active's broker is killed",
			func(ctx context.Context, cfg benchConfig) (*result, error) {
				return benchLDM(ctx, cfg, ldmApConn(ldm.SwitchToPassive), faultActiveKill)
			}},
		{"idle-footprint", "goroutines and heap of idle ApConnections against pairs of nats.Conn", benchIdle},
	}
}

// subject is a connection under test: an ApConnection or a plain nats.Conn.
type subject interface {
	Publish(subj string, data []byte) error
	subscribe(subj string, f func([]byte)) error
	flush(ctx context.Context) error
	activeID() string
	passiveID() string
	// switched delivers the time the path through the new broker opened.
	switched() <-chan time.Time
	// noticed delivers the time an LDM notice reached the connection (nil
	// for a plain connection).
	noticed() <-chan time.Time
	// rehomed delivers the time a new passive was armed.
	rehomed() <-chan time.Time
	close()
}

type factory func(ctx context.Context, cl *natstest.Cluster, cfg benchConfig) (subject, error)

// apSubject is an ApConnection under test.
type apSubject struct {
	*apconn.Conn
	sw, rh, ldm chan time.Time
}

func ldmApConn(h ldm.LameDuckHandling, extra ...apconn.Option) factory {
	return func(ctx context.Context, cl *natstest.Cluster, cfg benchConfig) (subject, error) {
		s := &apSubject{sw: make(chan time.Time, 16), rh: make(chan time.Time, 16), ldm: make(chan time.Time, 16)}
		onEvent := func(e apconn.Event) {
			ch := map[apconn.EventKind]chan time.Time{apconn.EventSwitched: s.sw, apconn.EventPassiveArmed: s.rh, apconn.EventLameDuck: s.ldm}[e.Kind]
			if ch != nil {
				select {
				case ch <- e.At:
				default:
				}
			}
		}
		opts := append([]apconn.Option{
			apconn.WithLameDuckHandling(h),
			apconn.WithNATSOptions(cl.ClientOptions()...),
			apconn.WithEventHandler(onEvent),
			apconn.WithLogger(cfg.log),
		}, extra...)
		c, err := apconn.Connect(ctx, cl.URLs(), opts...)
		if err != nil {
			return nil, err
		}
		if c.Status() != apconn.StatusConnected {
			c.Close()
			return nil, fmt.Errorf("connection is %v, want a full pair", c.Status())
		}
		// Drop the initial arm event.
		select {
		case <-s.rh:
		default:
		}
		s.Conn = c
		return s, nil
	}
}

func (s *apSubject) subscribe(subj string, f func([]byte)) error {
	_, err := s.Subscribe(subj, func(m *nats.Msg) { f(m.Data) })
	return err
}
func (s *apSubject) flush(ctx context.Context) error { return s.Flush(ctx) }
func (s *apSubject) activeID() string {
	a, _ := s.ActiveServer()
	return a.ID
}
func (s *apSubject) passiveID() string {
	p, _ := s.PassiveServer()
	return p.ID
}
func (s *apSubject) switched() <-chan time.Time { return s.sw }
func (s *apSubject) rehomed() <-chan time.Time  { return s.rh }
func (s *apSubject) noticed() <-chan time.Time  { return s.ldm }
func (s *apSubject) close()                     { s.Close() }

// plainSubject is nats.go on its own, calling ForceReconnect when its
// broker announces LDM: the best a plain client can do.
type plainSubject struct {
	*nats.Conn
	sw chan time.Time
}

func plainForceReconnect(ctx context.Context, cl *natstest.Cluster, cfg benchConfig) (subject, error) {
	s := &plainSubject{sw: make(chan time.Time, 16)}
	opts := append(cl.ClientOptions(),
		nats.LameDuckModeHandler(func(nc *nats.Conn) { nc.ForceReconnect() }),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case s.sw <- time.Now():
			default:
			}
		}),
		nats.MaxReconnects(-1))
	nc, err := nats.Connect(cl.URLs()[0], opts...)
	if err != nil {
		return nil, err
	}
	s.Conn = nc
	return s, nil
}

func (s *plainSubject) subscribe(subj string, f func([]byte)) error {
	_, err := s.Subscribe(subj, func(m *nats.Msg) { f(m.Data) })
	return err
}
func (s *plainSubject) flush(ctx context.Context) error { return s.FlushWithContext(ctx) }
func (s *plainSubject) activeID() string                { return s.ConnectedServerId() }
func (s *plainSubject) passiveID() string               { return "" }
func (s *plainSubject) switched() <-chan time.Time      { return s.sw }
func (s *plainSubject) rehomed() <-chan time.Time       { return nil }
func (s *plainSubject) noticed() <-chan time.Time       { return nil }
func (s *plainSubject) close()                          { s.Close() }

// fault is what a scenario does to the cluster: lame-duck mode or a kill,
// on the active's broker or the passive's.
type fault struct {
	passive bool
	kill    bool
}

var (
	faultActiveLDM  = fault{}
	faultPassiveLDM = fault{passive: true}
	faultActiveKill = fault{kill: true}
)

// apply hits the broker and returns it and a channel closed when it is down.
func (f fault) apply(cl *natstest.Cluster, s subject) (*natstest.Node, <-chan struct{}, error) {
	id, role := s.activeID(), "active"
	if f.passive {
		id, role = s.passiveID(), "passive"
	}
	n := cl.NodeByServerID(id)
	if n == nil {
		return nil, nil, fmt.Errorf("%s broker not found", role)
	}
	if !f.kill {
		return n, n.EnterLameDuck(), nil
	}
	n.Kill()
	done := make(chan struct{})
	close(done)
	return n, done, nil
}

// startBenchCluster starts the three-node cluster of a scenario with the
// command line's grace period, RTT and TLS, plus extra options.
func startBenchCluster(ctx context.Context, cfg benchConfig, extra ...natstest.Option) (*natstest.Cluster, error) {
	opts := append([]natstest.Option{
		natstest.WithLameDuck(cfg.grace+time.Second, cfg.grace),
	}, extra...)
	if cfg.rtt > 0 {
		opts = append(opts, natstest.WithClientRTT(cfg.rtt))
	}
	if cfg.tls {
		opts = append(opts, natstest.WithTLS())
	}
	return natstest.Start(ctx, opts...)
}

// benchLDM runs one connection-under-test and fault combination cfg.runs
// times: 1 kHz of traffic published and subscribed through the subject,
// the fault, and the time from the fault to the first message delivered
// through the new broker.
func benchLDM(ctx context.Context, cfg benchConfig, mk factory, hit fault) (*result, error) {
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	r := &result{}
	var rehomes, notices []float64
	var moved, outOfOrder, sent uint64
	var rawGap, block float64
	for run := 1; run <= cfg.runs; run++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		o, err := benchOnce(ctx, cl, cfg, mk, hit, run)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		r.Runs++
		if o.switchDur > 0 {
			r.addSwitch(o.switchDur)
		}
		if o.rehome > 0 {
			rehomes = append(rehomes, ms(o.rehome))
		}
		if o.notice > 0 {
			notices = append(notices, ms(o.notice))
		}
		if o.moved {
			moved++
		}
		r.MaxGap = max(r.MaxGap, ms(o.rep.MaxGap))
		rawGap = max(rawGap, ms(o.rawGap))
		block = max(block, ms(o.block))
		r.Lost += o.rep.Lost
		r.Duplicated += o.rep.Duplicated
		outOfOrder += o.rep.OutOfOrder
		sent += o.rep.Sent
		fmt.Fprintf(cfg.progress, "  run %d: switch %.3f ms (notice %.3f ms), rehome %.3f ms, max gap %.3f ms (at +%.0f ms), lost %d, dup %d, reordered %d\n",
			run, ms(o.switchDur), ms(o.notice), ms(o.rehome), ms(o.rep.MaxGap), ms(o.gapAt), o.rep.Lost, o.rep.Duplicated, o.rep.OutOfOrder)
	}
	r.set("raw_gap_ms", rawGap)
	r.set("publish_block_ms", block)
	r.set("sent", sent)
	r.set("out_of_order", outOfOrder)
	r.set("rtt_ms", ms(cfg.rtt))
	r.set("tls", cfg.tls)
	r.set("grace_ms", ms(cfg.grace))
	if len(notices) > 0 {
		// The broker's share of the switch time: its LDM notice.
		r.set("notice_ms_p50", percentile(notices, 50))
		r.set("notice_ms_max", percentile(notices, 100))
	}
	if len(rehomes) > 0 {
		r.set("rehome_ms_p50", percentile(rehomes, 50))
		r.set("rehome_ms_p99", percentile(rehomes, 99))
		r.set("rehome_ms_max", percentile(rehomes, 100))
		r.set("active_moved", moved)
	}
	return r, nil
}

type outcome struct {
	switchDur time.Duration
	notice    time.Duration // from the LDM call to the notice reaching the connection
	rehome    time.Duration
	moved     bool
	gapAt     time.Duration // when the longest silence ended, from the fault
	rawGap    time.Duration // longest silence beyond the nominal period
	block     time.Duration // longest Publish call
	rep       natstest.TrafficReport
}

func benchOnce(ctx context.Context, cl *natstest.Cluster, cfg benchConfig, mk factory, hit fault, run int) (outcome, error) {
	var o outcome
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := mk(cctx, cl, cfg)
	if err != nil {
		return o, err
	}
	defer s.close()
	subj := fmt.Sprintf("bench.%d", run)
	tr := natstest.NewTraffic(s, subj, cfg.rate)
	if err := s.subscribe(subj, tr.Observe); err != nil {
		return o, err
	}
	if err := s.flush(cctx); err != nil {
		return o, err
	}
	tr.Start()
	defer tr.Stop()
	if err := tr.WaitReceived(cctx, 200); err != nil {
		return o, err
	}
	activeBefore := s.activeID()

	start := time.Now()
	node, down, err := hit.apply(cl, s)
	if err != nil {
		return o, err
	}
	deadline := time.After(3*cfg.grace + 5*time.Second)
	var switchAt time.Time
	wantSwitch := !hit.passive
	// Events from before the fault (the first passive being armed) may
	// still be in the channels: take the first one after it.
	next := func(ch <-chan time.Time, what string) (time.Time, error) {
		for {
			select {
			case at := <-ch:
				if at.After(start) {
					return at, nil
				}
			case <-deadline:
				return time.Time{}, errors.New("no " + what)
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}
	if wantSwitch {
		if switchAt, err = next(s.switched(), "switch"); err != nil {
			return o, err
		}
	} else {
		at, err := next(s.rehomed(), "re-home")
		if err != nil {
			return o, err
		}
		o.rehome = at.Sub(start)
	}
	// Keep the traffic flowing until the hit node is gone, and a little
	// longer, so that an eviction after the switch is measured too.
	select {
	case <-down:
	case <-deadline:
		return o, errors.New("hit node did not shut down")
	}
	if err := tr.WaitReceived(cctx, tr.Sent()+200); err != nil {
		return o, err
	}
	tr.Stop()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	tr.Settle(sctx)
	scancel()
	o.rep = tr.Report()
	// Gaps are counted from the fault until the hit node has been down a
	// while: the scheduler noise of the warm-up is not the switch's.
	end := time.Now()
	o.rep.MaxGap, o.rep.MaxGapAt = tr.MaxGapBetween(start, end)
	o.gapAt = o.rep.MaxGapAt.Sub(start)
	o.rawGap, _ = tr.RawGapBetween(start, end)
	o.block = tr.MaxPublishBlock()
	if wantSwitch {
		var at time.Time
		var ok bool
		if _, plain := s.(*plainSubject); plain {
			at, ok = tr.FirstReceivedAfter(switchAt)
		} else if seq := tr.FirstSentAfter(switchAt); seq > 0 {
			at, ok = tr.ReceivedAt(seq)
		}
		if !ok {
			return o, errors.New("no message through the new broker")
		}
		o.switchDur = at.Sub(start)
	}
	o.notice = firstAfter(s.noticed(), start)
	o.moved = s.activeID() != activeBefore
	s.close()
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if err := node.Restart(rctx); err != nil {
		return o, fmt.Errorf("restart %s: %w", node.Name(), err)
	}
	return o, nil
}

// benchIdle compares the footprint of idle ApConnections with that of
// pairs of plain nats.Conn on the same cluster.
func benchIdle(ctx context.Context, cfg benchConfig) (*result, error) {
	cl, err := startBenchCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const n = 50
	measure := func(open func() (func(), error)) (goroutines int, heap uint64, err error) {
		runtime.GC()
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		g0 := runtime.NumGoroutine()
		var closers []func()
		defer func() {
			for _, c := range closers {
				c()
			}
		}()
		for range n {
			c, err := open()
			if err != nil {
				return 0, 0, err
			}
			closers = append(closers, c)
		}
		settleGoroutines()
		runtime.GC()
		var m1 runtime.MemStats
		runtime.ReadMemStats(&m1)
		return runtime.NumGoroutine() - g0, m1.HeapAlloc - m0.HeapAlloc, nil
	}
	urls := cl.URLs()
	gPlain, hPlain, err := measure(func() (func(), error) {
		a, err := nats.Connect(urls[0], cl.ClientOptions()...)
		if err != nil {
			return nil, err
		}
		b, err := nats.Connect(urls[1], cl.ClientOptions()...)
		if err != nil {
			a.Close()
			return nil, err
		}
		return func() { a.Close(); b.Close() }, nil
	})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	gAp, hAp, err := measure(func() (func(), error) {
		mu.Lock()
		defer mu.Unlock()
		c, err := apconn.Connect(ctx, urls, apconn.WithNATSOptions(cl.ClientOptions()...))
		if err != nil {
			return nil, err
		}
		return c.Close, nil
	})
	if err != nil {
		return nil, err
	}
	r := &result{Runs: 1}
	r.set("goroutines_per_apconn", float64(gAp)/n)
	r.set("goroutines_per_two_nats", float64(gPlain)/n)
	r.set("goroutine_ratio", float64(gAp)/float64(gPlain))
	r.set("heap_kib_per_apconn", float64(hAp)/n/1024)
	r.set("heap_kib_per_two_nats", float64(hPlain)/n/1024)
	r.set("heap_ratio", float64(hAp)/float64(hPlain))
	return r, nil
}

// settleGoroutines waits until the goroutine count stops changing: the
// connections have finished starting up.
func settleGoroutines() {
	last, stable := -1, 0
	for stable < 5 {
		time.Sleep(20 * time.Millisecond)
		if n := runtime.NumGoroutine(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
}

// firstAfter returns how long after start the first time queued on ch
// falls, or 0 if none does. It does not wait.
func firstAfter(ch <-chan time.Time, start time.Time) time.Duration {
	for {
		select {
		case at := <-ch:
			if at.After(start) {
				return at.Sub(start)
			}
		default:
			return 0
		}
	}
}
