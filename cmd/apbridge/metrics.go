package main

import (
	"math"
	"strings"

	"github.com/apbridge/apbridge/bridge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics reads the relay's counters at scrape time: the bridge and the
// connection keep them, so there is nothing to update on the hot path.
// Before the relay has started it reports nothing.
type metrics struct{ r *running }

// newRegistry returns the registry /metrics serves: the relay's metrics,
// the Go runtime's, the process's and the build's (apbridge's version).
func newRegistry(r *running) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.collectors()...)
	return reg
}

// collectors are what /metrics serves.
func (r *running) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		&metrics{r: r},
		r.hist.nats, r.hist.source,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		buildInfoGauge(readBuildInfo()),
	}
}

var (
	mSwitches = prometheus.NewDesc("apbridge_nats_switches_total",
		"Promotions of the passive NATS connection, by cause.", []string{"cause"}, nil)
	mNATSUp = prometheus.NewDesc("apbridge_nats_status",
		"1 for the NATS connection's current status (connected, degraded, reconnecting, closed).", []string{"status"}, nil)
	mReplayed = prometheus.NewDesc("apbridge_nats_replayed_total",
		"Publishes sent again on a new active broker because the old one had not confirmed them.", nil, nil)
	mLameDuck = prometheus.NewDesc("apbridge_nats_lame_duck_notices_total",
		"Lame-duck notices received from the brokers.", nil, nil)
	mUpdatesIn = prometheus.NewDesc("apbridge_updates_in_total",
		"Tag updates received from a source.", []string{"source"}, nil)
	mUpdatesOut = prometheus.NewDesc("apbridge_updates_out_total",
		"Tag updates handed to NATS.", []string{"source"}, nil)
	mPublishErrors = prometheus.NewDesc("apbridge_publish_errors_total",
		"Tag updates NATS did not accept.", []string{"source"}, nil)
	mUnsupported = prometheus.NewDesc("apbridge_unsupported_values_total",
		"Tag updates whose value type the relay cannot carry (published as Bad).", []string{"source"}, nil)
	mSourceState = prometheus.NewDesc("apbridge_source_state",
		"1 for a source's current state (connecting, connected, degraded, down, closed).", []string{"source", "state"}, nil)
	mServiceLevel = prometheus.NewDesc("apbridge_source_service_level",
		"The ServiceLevel of the server a source reads from (-1 unknown).", []string{"source"}, nil)
	mTags = prometheus.NewDesc("apbridge_tags",
		"Tags of a source with a value, by the quality of their last value (good, uncertain, bad).", []string{"source", "quality"}, nil)
	mTagsFailed = prometheus.NewDesc("apbridge_tags_failed",
		"Tags of a source not subscribed: the server refused them (unknown node, bad filter).", []string{"source"}, nil)
	mTagsNoValue = prometheus.NewDesc("apbridge_tags_no_value",
		"Tags of a source subscribed without a value yet.", []string{"source"}, nil)
	mSubRequests = prometheus.NewDesc("apbridge_subscribe_requests_total",
		"Subscribe requests sent to a source.", []string{"source"}, nil)
	mSubFailures = prometheus.NewDesc("apbridge_subscribe_retries_total",
		"Subscribe requests that failed in whole or in part and will be retried.", []string{"source"}, nil)
	mSubLost = prometheus.NewDesc("apbridge_subscribe_lost_replies_total",
		"Subscribe requests presumed lost after the in-flight ceiling.", []string{"source"}, nil)
	mWrites = prometheus.NewDesc("apbridge_writes_total",
		"Write-back requests, and those that failed.", []string{"source", "result"}, nil)
	mRefreshes = prometheus.NewDesc("apbridge_source_refreshes_total",
		"Snapshot refreshes of a source (after it connected or switched servers).", []string{"source"}, nil)
	mLinkRecoveries = prometheus.NewDesc("apbridge_source_link_recoveries_total",
		"Lost links a source rode out on the same session (an OPC UA session activated on a new channel, a gateway event stream resumed), without a refresh.", []string{"source"}, nil)
	mRepublished = prometheus.NewDesc("apbridge_source_republished_total",
		"Notifications a source asked its server for again after a lost link (OPC UA Republish).", []string{"source"}, nil)
	mSuccessor = prometheus.NewDesc("apbridge_source_successor_takeovers_total",
		"Takeovers at start of what the relay's predecessor left on a source's server (stateDir): result=transferred took its subscription over without a refresh, result=fallback created new subscriptions with a refresh.", []string{"source", "result"}, nil)
	mJSAcked = prometheus.NewDesc("apbridge_jetstream_acked_total",
		"Updates the stream acknowledged; kind=duplicate for those it already had.", []string{"kind"}, nil)
	mJSRepublished = prometheus.NewDesc("apbridge_jetstream_republished_total",
		"Updates sent to the stream again (after a switch, a leader election, an ack timeout or an error).", nil, nil)
	mJSTimeouts = prometheus.NewDesc("apbridge_jetstream_ack_timeouts_total",
		"Publishes not acknowledged within the ack timeout.", nil, nil)
	mJSRejected = prometheus.NewDesc("apbridge_jetstream_rejected_total",
		"Updates the stream refused for good (too large); each is logged.", nil, nil)
	mJSFenced = prometheus.NewDesc("apbridge_jetstream_fenced_total",
		"Updates not stored because a newer owner of their source stores the tag (a fleet's handover).", nil, nil)
	mJSBlocked = prometheus.NewDesc("apbridge_jetstream_backpressure_total",
		"Publishes that waited for room in the pending window (backpressure toward the source).", nil, nil)
	mJSPending = prometheus.NewDesc("apbridge_jetstream_pending",
		"Updates published and not yet acknowledged by the stream.", nil, nil)
	mJSReady = prometheus.NewDesc("apbridge_jetstream_ready",
		"1 when the stream stores (leader, quorum current, recent health check).", nil, nil)
	mEdgeFill = prometheus.NewDesc("apbridge_edge_site_fill_ratio",
		"The site stream's fill against its limit (maxBytes, maxMsgs), 0-1.", []string{"limit"}, nil)
	mEdgeRate = prometheus.NewDesc("apbridge_edge_site_rate_bytes_per_second",
		"What the site stream took per second over edge.rateWindow.", nil, nil)
	mEdgeAbsorb = prometheus.NewDesc("apbridge_edge_absorb_seconds",
		"How long a WAN outage, from now, the site stream absorbs at the current rate before a limit discards anything the hub lacks (+Inf: no limit is reached).", nil, nil)
	mEdgeFloor = prometheus.NewDesc("apbridge_edge_outage_floor_seconds",
		"edge.outageFloor: the outage the site must absorb.", nil, nil)
	mEdgeWarning = prometheus.NewDesc("apbridge_edge_warning",
		"1 while the last edge check has a warning (absorb time under the floor, hub unreachable or not sourcing).", nil, nil)
	mEdgeUnsourced = prometheus.NewDesc("apbridge_edge_unsourced_messages",
		"Site stream messages the hub does not have yet (as of its last answer).", nil, nil)
	mEdgeHubReachable = prometheus.NewDesc("apbridge_edge_hub_reachable",
		"1 when the hub's JetStream answered the last edge check across the WAN.", nil, nil)
	mEdgeLastCaughtUp = prometheus.NewDesc("apbridge_edge_hub_last_caught_up_timestamp_seconds",
		"When the hub stream last had every site message (Unix time; 0: not seen since the relay started).", nil, nil)
)

// edgeDescs are the metrics of an edge site.
var edgeDescs = []*prometheus.Desc{mEdgeFill, mEdgeRate, mEdgeAbsorb, mEdgeFloor, mEdgeWarning, mEdgeUnsourced, mEdgeHubReachable, mEdgeLastCaughtUp}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mSwitches, mNATSUp, mReplayed, mLameDuck, mUpdatesIn, mUpdatesOut,
		mPublishErrors, mUnsupported, mSourceState, mServiceLevel, mTags, mTagsFailed, mTagsNoValue, mSubRequests, mSubFailures, mSubLost, mWrites, mRefreshes, mLinkRecoveries, mRepublished, mSuccessor,
		mJSAcked, mJSRepublished, mJSTimeouts, mJSRejected, mJSFenced, mJSBlocked, mJSPending, mJSReady} {
		ch <- d
	}
	for _, d := range fleetDescs {
		ch <- d
	}
	for _, d := range edgeDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	rl := m.r.relay.Load()
	if rl == nil {
		return
	}
	cs := rl.Conn().Stats()
	for _, cause := range []string{"lame-duck", "active-down", "link-timeout", "manual"} {
		counter(mSwitches, float64(cs.SwitchesByCause[cause]), cause)
	}
	status := rl.Conn().Status().String()
	for _, s := range []string{"connected", "degraded", "reconnecting", "closed"} {
		gauge(mNATSUp, b2f(s == status), s)
	}
	counter(mReplayed, float64(cs.Replayed))
	counter(mLameDuck, float64(cs.LameDuckNotices))
	for _, s := range rl.Bridge().Stats() {
		counter(mUpdatesIn, float64(s.Updates), s.Name)
		counter(mUpdatesOut, float64(s.Published), s.Name)
		counter(mPublishErrors, float64(s.PublishErrors), s.Name)
		counter(mUnsupported, float64(s.Unsupported), s.Name)
		for _, st := range []bridge.State{bridge.StateConnecting, bridge.StateConnected, bridge.StateDegraded, bridge.StateDown, bridge.StateClosed, bridge.StateNotOwned} {
			gauge(mSourceState, b2f(s.Health.State == st), s.Name, string(st))
		}
		gauge(mServiceLevel, float64(s.Health.Level), s.Name)
		gauge(mTags, float64(s.Good), s.Name, "good")
		gauge(mTags, float64(s.Uncertain), s.Name, "uncertain")
		gauge(mTags, float64(s.Bad), s.Name, "bad")
		gauge(mTagsFailed, float64(s.Failed), s.Name)
		gauge(mTagsNoValue, float64(s.NoValue), s.Name)
		counter(mSubRequests, float64(s.SubscribeRequests), s.Name)
		counter(mSubFailures, float64(s.SubscribeFailures), s.Name)
		counter(mSubLost, float64(s.LostReplies), s.Name)
		counter(mWrites, float64(s.Writes-s.WriteErrors), s.Name, "ok")
		counter(mWrites, float64(s.WriteErrors), s.Name, "error")
		counter(mRefreshes, float64(s.Refreshes), s.Name)
		counter(mLinkRecoveries, float64(s.LinkRecoveries), s.Name)
		counter(mRepublished, float64(s.Republished), s.Name)
		counter(mSuccessor, float64(s.SuccessorTransfers), s.Name, "transferred")
		counter(mSuccessor, float64(s.SuccessorFallbacks), s.Name, "fallback")
	}
	if js := rl.JetStream(); js != nil {
		st := js.Stats()
		counter(mJSAcked, float64(st.Acked-st.Duplicates), "new")
		counter(mJSAcked, float64(st.Duplicates), "duplicate")
		counter(mJSRepublished, float64(st.Republished))
		counter(mJSTimeouts, float64(st.Timeouts))
		counter(mJSRejected, float64(st.Rejected))
		counter(mJSFenced, float64(st.Fenced))
		counter(mJSBlocked, float64(st.Blocked))
		gauge(mJSPending, float64(st.Pending))
		ready, _ := js.Ready()
		gauge(mJSReady, b2f(ready))
	}
	m.collectFleet(ch)
	if mon := rl.Edge(); mon != nil {
		if r, err := mon.Report(); !r.CheckedAt.IsZero() {
			gauge(mEdgeFill, r.Site.FillBytes, "maxBytes")
			gauge(mEdgeFill, r.Site.FillMsgs, "maxMsgs")
			gauge(mEdgeRate, r.Site.RateBytes)
			absorb := r.Absorb.Seconds()
			if r.Unbounded {
				absorb = math.Inf(1)
			}
			gauge(mEdgeAbsorb, absorb)
			gauge(mEdgeFloor, r.OutageFloor.Seconds())
			gauge(mEdgeWarning, b2f(len(r.Warnings) > 0 || err != nil))
			gauge(mEdgeUnsourced, float64(r.Unsourced))
			gauge(mEdgeHubReachable, b2f(r.Hub.Reachable))
			var ts float64
			if !r.Hub.LastCaughtUp.IsZero() {
				ts = float64(r.Hub.LastCaughtUp.UnixMilli()) / 1000
			}
			gauge(mEdgeLastCaughtUp, ts)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildInfoGauge is apbridge_build_info, 1 with the version, revision,
// build date and Go version as labels, in the convention of Prometheus's
// own exporters: a join on it labels any series with the relay's version.
func buildInfoGauge(b buildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "apbridge_build_info",
		Help:        "1, labelled with the relay's version, VCS revision, build date and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.metadata()["revision"], "build_date": b.Time, "goversion": b.Go},
	})
	g.Set(1)
	return g
}

// histograms are the durations of failovers, observed as they happen.
type histograms struct {
	nats, source *prometheus.HistogramVec
}

func newHistograms() histograms {
	return histograms{
		nats: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apbridge_nats_switch_duration_seconds",
			Help:    "How long a switch to the passive NATS connection took, from its trigger, by cause.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"cause"}),
		source: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apbridge_source_failover_duration_seconds",
			Help:    "How long a source's failover to its other server or gateway took, by source and cause.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"source", "cause"}),
	}
}

// causeLabels are the causes a failover can have, as label values; any
// other text (an error a source could not classify) is "other", so that
// the label stays a short list.
var causeLabels = func() map[string]string {
	m := map[string]string{}
	for _, c := range []string{
		// apconn
		"lame-duck", "active-down", "link-timeout", "manual",
		// OPC UA pairs (servicelevel)
		"degraded window", "ServiceLevel 0", "connect-time preference", "lost link after a degraded level",
		"standby became Healthy", "connect retries exhausted", "link lost", "connect failed", "connection refused",
		"session ended", "peer level unknown",
		"peer not Healthy", "peer not higher", "reconnect", "startup",
		// MxAccess gateways (mxsource)
		"health ping past its deadline", "heartbeats missing", "event queue overflow",
		"session ended by the gateway", "session lost", "gateway unreachable",
	} {
		m[c] = strings.NewReplacer(" ", "_", "-", "_").Replace(strings.ToLower(c))
	}
	return m
}()

func causeLabel(cause string) string {
	if l, ok := causeLabels[cause]; ok {
		return l
	}
	return "other"
}
