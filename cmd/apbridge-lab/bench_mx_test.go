package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// mx-failover (warm and hot) and mx-restart run twice each on a few tags
// through the bench's own command line and report their fields with sane
// values. The figures themselves are the bench's job (docs/benchmarks.md).
// mx-storm at the incident's clock takes minutes: TestMxStormShort runs it
// scaled down.
func TestMxScenariosRun(t *testing.T) {
	common := []string{"--json", "--runs", "2", "--tags", "8"}
	got := benchJSON(t, 2*time.Minute, append(common, "mx-failover", "mx-restart")...)
	hot := benchJSON(t, time.Minute, append(common, "--mode", "hot", "mx-failover")...)["mx-failover"]

	num := func(name string, m map[string]any, field string) float64 {
		t.Helper()
		v, ok := m[field].(float64)
		if !ok {
			t.Errorf("%s: field %s is %v, want a number", name, field, m[field])
		}
		return v
	}
	for mode, fo := range map[string]map[string]any{"warm": got["mx-failover"], "hot": hot} {
		name := "mx-failover " + mode
		if fo == nil {
			t.Errorf("%s: no result", name)
			continue
		}
		t.Logf("%s: %v", name, fo)
		if fo["mode"] != mode {
			t.Errorf("%s: mode %v", name, fo["mode"])
		}
		if r := num(name, fo, "runs"); r != 2 {
			t.Errorf("%s: %v runs, want 2", name, r)
		}
		if n := num(name, fo, "switches"); n != 2 {
			t.Errorf("%s: %v switches in 2 runs, want 2", name, n)
		}
		if n := num(name, fo, "tags"); n != 8 {
			t.Errorf("%s: %v tags, want 8", name, n)
		}
		for _, f := range []string{"switch_ms_p50", "switch_ms_p99", "switch_ms_max", "resume_ms_p50", "source_switch_ms_p50"} {
			if v := num(name, fo, f); v <= 0 || v > 15000 {
				t.Errorf("%s: %s = %v ms, want within (0, 15000]", name, f, v)
			}
		}
		if p50, p99 := num(name, fo, "switch_ms_p50"), num(name, fo, "switch_ms_p99"); p50 > p99 {
			t.Errorf("%s: p50 %v above p99 %v", name, p50, p99)
		}
		for _, f := range []string{"lost", "duplicated", "bad_updates", "snapshot_repeats", "updates"} {
			if v := num(name, fo, f); v < 0 {
				t.Errorf("%s: %s = %v", name, f, v)
			}
		}
		if num(name, fo, "updates") == 0 {
			t.Errorf("%s: the consumer received nothing", name)
		}
	}

	rs := got["mx-restart"]
	if rs == nil {
		t.Fatal("mx-restart: no result")
	}
	t.Logf("mx-restart: %v", rs)
	const name = "mx-restart"
	if r := num(name, rs, "runs"); r != 2 {
		t.Errorf("%s: %v runs, want 2", name, r)
	}
	for _, f := range []string{"good_again_ms_p50", "good_again_ms_p99", "graceful_good_again_ms_p99"} {
		if v := num(name, rs, f); v <= 0 || v > 30000 {
			t.Errorf("%s: %s = %v ms, want within (0, 30000]", name, f, v)
		}
	}
	for _, f := range []string{"resubscribes_per_restart", "resubscribes_per_restart_min", "resubscribes_per_graceful_end", "resubscribes_per_graceful_end_min"} {
		if v := num(name, rs, f); v < 1 {
			t.Errorf("%s: %s = %v: the gateway saw no subscribe", name, f, v)
		}
	}
	if lo, hi := num(name, rs, "resubscribes_per_restart_min"), num(name, rs, "resubscribes_per_restart"); lo > hi {
		t.Errorf("%s: min %v above max %v", name, lo, hi)
	}
}

// The gateway source has two standby modes; the servicelevel one it lacks
// is refused by name before anything starts.
func TestMxFailoverRefusesPrepared(t *testing.T) {
	err := runBench(context.Background(), []string{"--mode", "prepared", "mx-failover"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--mode: "prepared" is not a gateway mode (valid for mx-*: warm, hot)`) {
		t.Fatalf("error %v", err)
	}
}

// mx-storm at a tenth of the incident's clock (about 11 s): the guard
// keeps one subscribe in flight on a wedged gateway and the tags come back
// after it recovers; the capability gate holds.
func TestMxStormShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := benchConfig{runs: 1, grace: 2 * time.Second, log: zerolog.Nop(), progress: io.Discard}
	r, err := runMxStorm(ctx, cfg, shortStormTiming())
	if err != nil {
		t.Fatal(err)
	}
	field := func(key string) any {
		for _, e := range r.extra {
			if e.key == key {
				return e.val
			}
		}
		t.Fatalf("no field %s in %+v", key, r.extra)
		return nil
	}
	t.Logf("%+v", r.extra)
	if v := field("max_in_flight"); v != 1 {
		t.Errorf("max_in_flight %v, want 1", v)
	}
	if v, ok := field("subscribe_requests").(uint64); !ok || v > 4 {
		t.Errorf("subscribe_requests %v, want at most 4", field("subscribe_requests"))
	}
	if v := field("recovered"); v != true {
		t.Errorf("recovered %v", v)
	}
	if v := field("supervisory_bulk_to_old_gateway"); v != uint64(0) {
		t.Errorf("supervisory_bulk_to_old_gateway %v, want 0", v)
	}
	if v := field("commands_per_subscribe"); v != uint64(1) {
		t.Errorf("commands_per_subscribe %v, want 1", v)
	}
}
