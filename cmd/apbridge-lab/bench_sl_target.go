package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/faultproxy"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
)

// The servers the sl-* scenarios run on (--server).
const (
	serverEmbedded = "embedded" // uaserver's redundant pair
	serverNode     = "node"     // two node-opcua servers: an implementation we did not write
)

// slTarget is a redundant server pair a scenario injects its faults into.
type slTarget interface {
	endpoints() []string
	items() []uaclient.Item
	// recorder returns a consumer for one run.
	recorder() *slRecorder
	// reset brings both servers up, healed, at the given levels.
	reset(ctx context.Context, levels [2]byte) error
	// gracefulStop promotes B to 250 and has A announce 0 and stop a
	// second later; the channel closes when A is down.
	gracefulStop() <-chan struct{}
	// setLevel sets one server's ServiceLevel and returns once the
	// server publishes it.
	setLevel(ctx context.Context, ep servicelevel.Endpoint, level byte) error
	kill()       // A's process dies
	freeze()     // A's link freezes
	heal()       // A's link thaws
	resetConns() // A's connections are reset, A stays up
	close()
}

func startSLTarget(ctx context.Context, cfg benchConfig) (slTarget, error) {
	if cfg.server == serverNode {
		if cfg.rtt > 0 {
			return nil, fmt.Errorf("--rtt is not available with --server %s", serverNode)
		}
		return &nodeTarget{tags: cfg.tags}, nil
	}
	p, err := startSLCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &embeddedTarget{p: p}, nil
}

// embeddedTarget is uaserver's pair: 16 simulated tags ticking every
// 100 ms, the same process values on both servers.
type embeddedTarget struct{ p *uaserver.Pair }

func (t *embeddedTarget) endpoints() []string { return t.p.Endpoints() }

func (t *embeddedTarget) items() []uaclient.Item {
	var items []uaclient.Item
	for i, tag := range t.p.Tags() {
		items = append(items, uaclient.Item{Handle: uint32(i), NodeID: tag.NodeID().String()})
	}
	return items
}

func (t *embeddedTarget) recorder() *slRecorder { return newSLRecorder(t.p.Tags()) }

func (t *embeddedTarget) reset(ctx context.Context, levels [2]byte) error {
	for i, s := range t.p.Servers() {
		s.SetLevelEncoding(uaserver.LevelAsByte)
		if !s.Running() {
			if err := s.Restart(ctx, levels[i]); err != nil {
				return err
			}
			continue
		}
		s.Heal()
		s.SetLevel(levels[i])
	}
	return nil
}

func (t *embeddedTarget) gracefulStop() <-chan struct{} {
	t.p.B().Promote()
	return t.p.A().GracefulStop(time.Second).Done()
}

func (t *embeddedTarget) setLevel(_ context.Context, ep servicelevel.Endpoint, level byte) error {
	t.p.Servers()[ep].SetLevel(level)
	return nil
}

func (t *embeddedTarget) kill()       { t.p.A().Kill() }
func (t *embeddedTarget) freeze()     { t.p.A().Freeze() }
func (t *embeddedTarget) heal()       { t.p.A().Heal() }
func (t *embeddedTarget) resetConns() { t.p.A().ResetConns() }
func (t *embeddedTarget) close()      { t.p.Close() }

// nodeTarget is two node-opcua servers (interop/node-opcua), each behind a
// fault proxy, started anew for every run: a counter ticking every 100 ms
// on each, Bad_OutOfService below level 200 (Warm redundancy), and with
// --tags that many more variables (a quarter counting every second). The
// two count independently, so lost and duplicated ticks are not counted;
// the switch time, the gap, out-of-order and Bad samples are.
type nodeTarget struct {
	tags    int
	srv     [2]*nodeopcua.Server
	proxies [2]*faultproxy.Proxy
}

// nodeCounter names the interop server's counter by namespace URI.
const nodeCounter = "nsu=urn:apbridge:interop;s=Counter"

func (t *nodeTarget) endpoints() []string {
	return []string{"opc.tcp://" + t.proxies[0].Addr(), "opc.tcp://" + t.proxies[1].Addr()}
}

func (t *nodeTarget) items() []uaclient.Item {
	items := []uaclient.Item{{Handle: 0, NodeID: nodeCounter}}
	for i := range t.tags {
		items = append(items, uaclient.Item{Handle: uint32(i + 1), NodeID: fmt.Sprintf("nsu=urn:apbridge:interop;s=T%d", i)})
	}
	return items
}

func (t *nodeTarget) recorder() *slRecorder {
	r := newSLRecorder(nil)
	r.counters[0] = true
	r.independent = true
	return r
}

func (t *nodeTarget) reset(ctx context.Context, levels [2]byte) error {
	t.close()
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			s, err := nodeopcua.Start(ctx, nodeopcua.Config{ServiceLevel: int(levels[i]), CounterMs: 100, Tags: t.tags})
			if err == nil {
				t.srv[i] = s
			}
			errs <- err
		}()
	}
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		t.close()
		return first
	}
	for i, s := range t.srv {
		p, err := faultproxy.New(s.Endpoint[len("opc.tcp://"):])
		if err != nil {
			t.close()
			return err
		}
		t.proxies[i] = p
	}
	return nil
}

func (t *nodeTarget) gracefulStop() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t.srv[1].SetLevel(ctx, 250)
		t.srv[0].Stop(ctx, time.Second)
	}()
	return done
}

func (t *nodeTarget) setLevel(ctx context.Context, ep servicelevel.Endpoint, level byte) error {
	return t.srv[ep].SetLevel(ctx, int(level))
}

func (t *nodeTarget) kill()       { t.srv[0].Kill() }
func (t *nodeTarget) freeze()     { t.proxies[0].Freeze() }
func (t *nodeTarget) heal()       { t.proxies[0].Heal() }
func (t *nodeTarget) resetConns() { t.proxies[0].ResetAll() }

func (t *nodeTarget) close() {
	for i := range 2 {
		if t.proxies[i] != nil {
			t.proxies[i].Close()
			t.proxies[i] = nil
		}
		if t.srv[i] != nil {
			t.srv[i].Close()
			t.srv[i] = nil
		}
	}
}
