package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/testcluster"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// runDemo shows an ApConnection under 1 kHz of traffic while its broker
// goes lame-duck, on the embedded three-node cluster, and exits non-zero if
// a message was lost.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grace := fs.Duration("grace", 2*time.Second, "lame-duck grace period of the brokers")
	verbose := fs.Bool("v", false, "log what the connection does (to stderr)")
	pretty := fs.Bool("pretty", true, "console log format instead of JSON (with -v)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zerolog.Nop()
	if *verbose {
		log = newLogger(stderr, *pretty, zerolog.InfoLevel)
	}
	demoStart := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(stdout, "%7.3fs  %s\n", time.Since(demoStart).Seconds(), fmt.Sprintf(format, a...))
	}

	say("starting a three-node NATS cluster (lame-duck grace %v)", *grace)
	cl, err := testcluster.StartNATS(ctx, testcluster.WithLameDuck(*grace+time.Second, *grace))
	if err != nil {
		return err
	}
	defer cl.Close()

	events := make(chan apconn.Event, 64)
	conn, err := apconn.Connect(ctx, cl.URLs(),
		apconn.WithName("apbridge-demo"),
		apconn.WithLameDuckHandling(ldm.SwitchToPassive),
		apconn.WithLogger(log),
		apconn.WithEventHandler(func(e apconn.Event) { events <- e }))
	if err != nil {
		return err
	}
	defer conn.Close()
	a, _ := conn.ActiveServer()
	p, _ := conn.PassiveServer()
	say("ApConnection up: active on %s, warm passive on %s", a.Name, p.Name)

	tr := testcluster.NewTraffic(conn, "demo.ticks", time.Millisecond)
	if _, err := conn.Subscribe("demo.ticks", func(m *nats.Msg) { tr.Observe(m.Data) }); err != nil {
		return err
	}
	if err := conn.Flush(ctx); err != nil {
		return err
	}
	tr.Start()
	defer tr.Stop()
	say("publishing 1000 messages/s through it, and subscribing to them")
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}

	// Forget the events of the start-up.
	for len(events) > 0 {
		<-events
	}
	node := cl.NodeByServerID(a.ID)
	say("putting the active's broker %s into lame-duck mode", node.Name())
	ldmAt := time.Now()
	down := node.EnterLameDuck()
	timeout := time.After(3**grace + 5*time.Second)
	var switched, armed bool
	for !switched || !armed {
		select {
		case e := <-events:
			switch e.Kind {
			case apconn.EventLameDuck:
				say("  lame-duck notice from %s reached the client after %v", e.From.Name, e.At.Sub(ldmAt).Round(time.Microsecond))
			case apconn.EventSwitched:
				switched = true
				say("  switched %s -> %s (cause %s) %v after the notice, %v after the LDM call",
					e.From.Name, e.To.Name, e.Cause, e.Duration.Round(time.Microsecond), e.At.Sub(ldmAt).Round(time.Microsecond))
			case apconn.EventPassiveArmed:
				armed = true
				say("  fresh passive armed on %s", e.To.Name)
			}
		case <-timeout:
			return fmt.Errorf("no switch within %v", 3**grace)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	say("waiting for %s to evict its clients and shut down (grace %v) ...", node.Name(), *grace)
	select {
	case <-down:
	case <-ctx.Done():
		return ctx.Err()
	}
	say("  %s is down; traffic carries on", node.Name())
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
		return err
	}
	tr.Stop()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	tr.Settle(sctx)
	cancel()
	r := tr.Report()
	st := conn.Stats()
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "sent %d  received %d  lost %d  duplicated %d  out of order %d  longest silence %v\n",
		r.Sent, r.Received, r.Lost, r.Duplicated, r.OutOfOrder, r.MaxGap.Round(time.Microsecond))
	fmt.Fprintf(stdout, "(longest silence at %v after the LDM call)\n", r.MaxGapAt.Sub(ldmAt).Round(time.Millisecond))
	fmt.Fprintf(stdout, "switches %d  passives armed %d  copies suppressed during the overlap %d\n",
		st.Switches, st.PassivesArmed, st.DuplicatesSuppressed)
	if r.Lost > 0 {
		fmt.Fprintln(stdout, "FAIL: messages were lost")
		return exitError{code: 1}
	}
	fmt.Fprintln(stdout, "OK: no message lost across the lame-duck switch")
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
