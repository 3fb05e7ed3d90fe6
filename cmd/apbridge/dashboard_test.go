package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/relay"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

const dashboardPath = "../../deploy/grafana/apbridge.json"

// TestDashboardQueriesExportedMetrics: every metric the Grafana dashboard
// queries is one the relay exports. The exported names come from a scrape
// of a relay that exports them all: in a fleet, with the JetStream sink,
// after a NATS switch and a source failover (the histograms' series exist
// once observed). The scrape is checked complete against what the
// relay's collectors describe, so a metric added later that this relay
// does not produce fails here until the test produces it.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	queries := dashboardQueries(t)
	if len(queries) < 20 {
		t.Fatalf("%d queries in the dashboard", len(queries))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, pair := startServers(t, ctx, 2, natstest.WithJetStream())
	c, err := relay.Load(writeRelayConfig(t, cl, pair, "sink: jetstream\njetstream: {replicas: 1}\nfleet: {relayId: dash, leaseTTL: 1s, replicas: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := startRelay(ctx, c, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		r.stop(sctx)
	}()
	testutil.WaitFor(t, "the source owned and connected", 30*time.Second, func() bool {
		ok, _ := r.ready()
		f := r.relay.Load().Fleet()
		return ok && f != nil && f.Stats().Owned == 1
	})
	if err := r.relay.Load().Conn().SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	pair.A().Kill()
	reg := newRegistry(r)
	var exported, families map[string]bool
	testutil.WaitFor(t, "both histograms observed", 30*time.Second, func() bool {
		exported, families = exportedNames(t, reg)
		return exported["apbridge_nats_switch_duration_seconds_bucket"] && exported["apbridge_source_failover_duration_seconds_bucket"]
	})

	// The scrape holds every apbridge metric the collectors describe,
	// but the edge monitor's: those exist only on an edge site's relay
	// (a site stream in a JetStream domain of its own, docs/edge.md),
	// which this fleet relay is not. The dashboard has no edge panel,
	// and may not get one unchecked (below).
	for _, name := range describedNames(r.collectors()) {
		if strings.HasPrefix(name, "apbridge_") && !strings.HasPrefix(name, edgeMetrics) && !families[name] {
			t.Errorf("%s is described but was not scraped: make this test's relay produce it", name)
		}
	}
	seen := map[string]bool{}
	for _, q := range queries {
		for _, m := range metricNames(q) {
			seen[m] = true
			if strings.HasPrefix(m, edgeMetrics) {
				t.Errorf("the dashboard queries %s, an edge metric this test's relay cannot export: give the test an edge relay first: %s", m, q)
				continue
			}
			if !exported[m] {
				t.Errorf("the dashboard queries %s, which the relay does not export: %s", m, q)
			}
		}
	}
	// The dashboard covers what the issue asked of it.
	for _, m := range []string{"apbridge_nats_switches_total", "apbridge_source_state", "apbridge_source_failover_duration_seconds_count",
		"apbridge_updates_in_total", "apbridge_jetstream_pending", "apbridge_fleet_owned_sources"} {
		if !seen[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the template variables' queries.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: a target without an expression", p.Title)
			}
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("template query %s: %v", v.Query, err)
		}
		// label_values(METRIC_SELECTOR, label): the selector is PromQL.
		m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("template query %q: not label_values(selector, label)", q.Query)
		}
		out = append(out, m[1])
	}
	return out
}

// exportedNames scrapes reg: the names of its series as PromQL sees them
// (a histogram's _bucket, _sum and _count), and of its metric families.
func exportedNames(t *testing.T, reg *prometheus.Registry) (names, families map[string]bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names, families = map[string]bool{}, map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		families[n] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	return names, families
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// describedNames are the names the collectors describe.
func describedNames(cs []prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 1024)
	for _, c := range cs {
		c.Describe(ch)
	}
	close(ch)
	var out []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// promqlWords are the words of PromQL that are not metric names when
// they stand alone (functions and aggregations are told by their
// parenthesis).
var promqlWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}

// metricNames returns the metric names a PromQL expression selects. It
// skips string literals, label matchers ({...}), ranges ([...]), the
// label lists of by, without, on, ignoring and group_*, function and
// aggregation names (a word followed by a parenthesis), keywords, numbers
// and durations.
func metricNames(expr string) []string {
	var names []string
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
		case c == '{':
			i = skipTo(s, i, '}')
		case c == '[':
			i = skipTo(s, i, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isWord(s[i]) || s[i] == '.') {
				i++
			}
		case isWord(c) || c == ':':
			j := i
			for j < len(s) && (isWord(s[j]) || s[j] == ':') {
				j++
			}
			w := s[i:j]
			k := j
			for k < len(s) && s[k] == ' ' {
				k++
			}
			next := k
			for next < len(s) && isWord(s[next]) {
				next++
			}
			switch {
			case s[k:next] == "by" || s[k:next] == "without":
				// an aggregation with its grouping before its argument
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, w) && k < len(s) && s[k] == '(':
				j = skipTo(s, k, ')')
			case k < len(s) && s[k] == '(':
				// a function or an aggregation
			case slices.Contains(promqlWords, strings.ToLower(w)):
			case strings.HasPrefix(w, "$"):
			default:
				names = append(names, w)
			}
			i = j
		case c == '$':
			// A Grafana variable outside a matcher: $name or ${name}.
			i++
			if i < len(s) && s[i] == '{' {
				i = skipTo(s, i, '}')
			}
			for i < len(s) && isWord(s[i]) {
				i++
			}
		default:
			i++
		}
	}
	return names
}

func isWord(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipTo returns the index after the first close at or after i outside a
// string literal.
func skipTo(s string, i int, close byte) int {
	for i < len(s) && s[i] != close {
		if q := s[i]; q == '"' || q == '\'' || q == '`' {
			i = skipString(s, i)
			continue
		}
		i++
	}
	return i + 1
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	j := i + 1
	for j < len(s) && s[j] != q {
		if s[j] == '\\' && q != '`' {
			j++
		}
		j++
	}
	return j + 1
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (le, cause) (rate(apbridge_nats_switch_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`: "apbridge_nats_switch_duration_seconds_bucket",
		`count(apbridge_nats_status{status=~"reconnecting|closed"} == 1) or vector(0)`:                                                               "apbridge_nats_status",
		`sum by (instance) (a_total{x="{y}"} - b_total offset 5m) / on (instance) group_left(version) c_info`:                                        "a_total b_total c_info",
		`max(x{l='a"b'}) > bool 1e3 and y:recorded:rate5m unless Inf`:                                                                                "x y:recorded:rate5m",
		`rate(process_cpu_seconds_total[${__rate_interval}])`:                                                                                        "process_cpu_seconds_total",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// edgeMetrics starts the names of the edge monitor's metrics.
const edgeMetrics = "apbridge_edge_"
