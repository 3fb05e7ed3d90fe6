package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/nodeopcua"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/apbridge/apbridge/wire"
)

// TestApplyLiveInterop: a live change on a server we did not write
// (node-opcua): a tag's monitoring changes at the server (a deadband now
// thins its updates), a removed tag is deleted there, an added one flows,
// a node the server does not know is reported for its tag alone, and the
// untouched tag's seq goes on with no refresh.
func TestApplyLiveInterop(t *testing.T) {
	srv := nodeopcua.StartT(t, nodeopcua.Config{CounterMs: 50})
	cl := testutil.StartCluster(t, natstest.WithNodes(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "nsu=urn:apbridge:interop;"
	conf := func(tags string) string {
		return fmt.Sprintf("nats: {servers: [%s]}\nhttp: {listen: \"\"}\nsources:\n  - name: plant\n    endpoints: [%s]\n    tags:\n%s",
			cl.URLs()[0], srv.Endpoint, tags)
	}
	first := fmt.Sprintf(`      - {name: Every, address: "%[1]ss=Counter"}
      - {name: Thinned, address: "%[1]ss=Counter"}
      - {name: Gone, address: "%[1]ss=Counter"}
`, ns)
	second := fmt.Sprintf(`      - {name: Every, address: "%[1]ss=Counter"}
      - {name: Thinned, address: "%[1]ss=Counter", filter: {deadbandType: absolute, deadbandValue: 4.5}}
      - {name: Name, address: "%[1]ss=Name"}
      - {name: Nope, address: "%[1]ss=NoSuchNode"}
`, ns)
	r, cons := startWatched(ctx, t, cl.URLs()[0], conf(first))
	defer r.Close()
	testutil.WaitFor(t, "counter values", 30*time.Second, func() bool { return cons.count("Thinned") >= 5 && cons.count("Gone") >= 5 })
	next, err := relay.Parse([]byte(conf(second)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, next, relay.Origin{Via: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	removedAt := cons.count("Gone")
	thinnedAt := cons.count("Thinned")
	testutil.WaitFor(t, "thinned updates and the added tag", 30*time.Second, func() bool {
		return cons.count("Thinned") >= thinnedAt+4 && cons.count("Name") >= 1
	})
	testutil.WaitFor(t, "the unknown node reported for its tag", 20*time.Second, func() bool {
		for _, f := range r.Bridge().Stats()[0].FailedTags {
			if f.Tag == "Nope" && strings.Contains(f.Error, "StatusBadNodeIDUnknown") {
				return true
			}
		}
		return false
	})
	if n := cons.count("Gone"); n != removedAt {
		t.Fatalf("the removed tag published %d updates after Apply", n-removedAt)
	}
	contiguous(t, "Every", cons.seqs("Every"))
	contiguous(t, "Thinned", cons.seqs("Thinned"))
	if cons.eventCount("refresh-start") > 1 { // the first connection's
		t.Fatal("the change caused a refresh")
	}
	cons.mu.Lock()
	th := append([]wire.Update(nil), cons.byTag["Thinned"][thinnedAt+1:]...) // the new item's first value, then data changes
	every := append([]wire.Update(nil), cons.byTag["Every"]...)
	cons.mu.Unlock()
	step := func(us []wire.Update) float64 {
		m := 1e9
		for i := 1; i < len(us); i++ {
			m = min(m, asFloat(us[i].Value)-asFloat(us[i-1].Value))
		}
		return m
	}
	if s := step(th); s < 4.5 {
		t.Fatalf("after the change the thinned tag moved in a step of %v: the deadband did not reach the server", s)
	}
	if s := step(every); s >= 4.5 {
		t.Fatalf("the positive control: the unfiltered counter's smallest step is %v", s)
	}
}

func asFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint32:
		return float64(x)
	}
	return 0
}
