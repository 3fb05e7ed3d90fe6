package mxsim

import (
	"testing"
	"time"

	"github.com/apbridge/apbridge/mxgateway/mxpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A gateway that advertises only today's nine capabilities does not know
// apbridge's own: it refuses a Ping as an empty command, sends no
// heartbeats (though its reply still fills the interval's field) and
// resumes no stream. The positive control: the same gateway with them.
func TestMxBaseCapabilities(t *testing.T) {
	for _, base := range []bool{true, false} {
		t.Run(map[bool]string{true: "base", false: "default"}[base], func(t *testing.T) {
			data := NewData()
			data.Define("Tank.Level", float64(1.5))
			g := startMx(t, data, 1)[0]
			g.SetHeartbeatInterval(20 * time.Millisecond)
			if base {
				g.SetCapabilities(BaseCapabilities())
			}
			s := openMx(t, dialMx(t, g.Addr()), 0, 0)
			_, err := s.invoke(pingCmd())
			st := g.Stats()
			if base {
				wantCode(t, "a Ping the gateway did not advertise", err, codes.InvalidArgument)
				if st.Unadvertised["Ping"] != 1 || st.CommandsByKind["Ping"] != 0 {
					t.Fatalf("stats %+v: want the Ping refused, counted as unadvertised", st)
				}
			} else if err != nil || st.CommandsByKind["Ping"] != 1 {
				t.Fatalf("Ping on a gateway that advertises it: %v, stats %+v", err, st)
			}
			s.handle(false, "Tank.Level")
			ev := s.events()
			if ev.next(t, 5*time.Second).GetOnDataChange() == nil {
				t.Fatal("the first event is not the advised item's value")
			}
			// 20 ms heartbeats: ten intervals idle.
			select {
			case e := <-ev.ch:
				if base {
					t.Fatalf("event %v on an idle stream of a gateway without %s", e, CapHeartbeat)
				}
				if e.GetHeartbeat() == nil {
					t.Fatalf("event %v: want a heartbeat", e)
				}
			case <-time.After(200 * time.Millisecond):
				if !base {
					t.Fatal("no heartbeat on an idle stream")
				}
			}
			ev.cancel()
			<-ev.done
			// A resume: refused without the capability, counted either way.
			// The gateway lets the cancelled stream go a moment after the
			// client did: until then it refuses a second subscriber.
			var attempts uint64
			for deadline := time.Now().Add(5 * time.Second); ; {
				attempts++
				var st2 grpc.ServerStreamingClient[mxpb.MxEvent]
				st2, err = s.c.StreamEvents(ctx5s(t), &mxpb.StreamEventsRequest{SessionId: s.id, ResumeAfter: 1})
				if err == nil {
					_, err = st2.Recv()
				}
				if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // a poll interval, the condition is checked above
			}
			if base {
				wantCode(t, "a resume the gateway did not advertise", err, codes.OutOfRange)
			} else if err != nil {
				// Nothing after event 1 but heartbeats: the stream
				// stays open; a heartbeat, an event, arrives.
				t.Fatalf("resume on a gateway that advertises it: %v", err)
			}
			if n := g.Stats().ResumeRequests; n != attempts {
				t.Fatalf("%d resume requests counted, want %d", n, attempts)
			}
		})
	}
}

// A session whose stream has no subscriber for the resume window ends; a
// subscriber back in time keeps it.
func TestMxResumeWindow(t *testing.T) {
	data := NewData()
	data.Define("Tank.Level", float64(1.5))
	g := startMx(t, data, 1)[0]
	g.SetResumeWindow(300 * time.Millisecond)
	c := dialMx(t, g.Addr())
	kept, gone := openMx(t, c, 0, 0), openMx(t, c, 0, 0)
	for _, s := range []*mxSess{kept, gone} {
		ev := s.events()
		ev.cancel()
		<-ev.done
	}
	kept.events() // back within the window
	waitMx(t, 5*time.Second, "the orphaned session ended", func() bool { return g.Stats().Sessions == 1 })
	if _, err := kept.invoke(pingCmd()); err != nil {
		t.Fatalf("the session with a subscriber: %v", err)
	}
	_, err := gone.invoke(pingCmd())
	wantCode(t, "a command on the orphaned session", err, codes.NotFound)
}
