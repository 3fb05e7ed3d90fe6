package relaychild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Both kinds of process publish every update they report as sent, on the
// tags' subjects, and report their figures in the line after "ready".
func TestRunPublishesWhatItReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := natstest.Start(ctx, natstest.WithNodes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nc, err := nats.Connect(cl.Node(0).URL(), cl.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			var got atomic.Int64
			sub, err := nc.Subscribe("apbridge.sim.Line1.>", func(*nats.Msg) { got.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			args := []string{"--nats", cl.Node(0).URL(), "--tags", "50", "--period", "10ms", "--duration", "300ms"}
			if plain {
				args = append(args, "--plain")
			}
			var stdout, stderr bytes.Buffer
			if err := Run(ctx, args, &stdout, &stderr); err != nil {
				t.Fatalf("%v; stderr: %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != 2 || lines[0] != "ready" {
				t.Fatalf("stdout %q, want ready and a summary", stdout.String())
			}
			var sum struct {
				Sent     int64   `json:"sent"`
				ReadyRSS float64 `json:"ready_rss_mib"`
			}
			if err := json.Unmarshal([]byte(lines[1]), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.Sent == 0 {
				t.Fatalf("sent nothing: %s", lines[1])
			}
			testutil.WaitFor(t, fmt.Sprintf("%d updates at the subscriber", sum.Sent), 10*time.Second, func() bool {
				return got.Load() >= sum.Sent
			})
			if n := got.Load(); n != sum.Sent {
				t.Fatalf("the subscriber got %d updates, the process reports %d sent", n, sum.Sent)
			}
		})
	}
}
