package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	mFleetOwned = prometheus.NewDesc("apbridge_fleet_owned_sources",
		"Sources whose lease this relay holds.", nil, nil)
	mFleetLive = prometheus.NewDesc("apbridge_fleet_live_relays",
		"Relays the fleet's bucket shows live, this one included.", nil, nil)
	mFleetChanges = prometheus.NewDesc("apbridge_fleet_ownership_changes_total",
		"Leases won and lost by this relay.", []string{"kind"}, nil)
	mFleetHandovers = prometheus.NewDesc("apbridge_fleet_handovers_total",
		"Sources handed over to another relay (rebalance and shutdown).", nil, nil)
	mFleetRenewFailures = prometheus.NewDesc("apbridge_fleet_renew_failures_total",
		"Lease renewals that failed without losing the lease.", nil, nil)
)

var fleetDescs = []*prometheus.Desc{mFleetOwned, mFleetLive, mFleetChanges, mFleetHandovers, mFleetRenewFailures}

// collectFleet adds the fleet's figures, for a relay in a fleet.
func (m *metrics) collectFleet(ch chan<- prometheus.Metric) {
	rl := m.r.relay.Load()
	if rl == nil {
		return
	}
	f := rl.Fleet()
	if f == nil {
		return
	}
	s := f.Stats()
	ch <- prometheus.MustNewConstMetric(mFleetOwned, prometheus.GaugeValue, float64(s.Owned))
	ch <- prometheus.MustNewConstMetric(mFleetLive, prometheus.GaugeValue, float64(s.Live))
	ch <- prometheus.MustNewConstMetric(mFleetChanges, prometheus.CounterValue, float64(s.Gained), "gained")
	ch <- prometheus.MustNewConstMetric(mFleetChanges, prometheus.CounterValue, float64(s.Lost), "lost")
	ch <- prometheus.MustNewConstMetric(mFleetHandovers, prometheus.CounterValue, float64(s.Handovers))
	ch <- prometheus.MustNewConstMetric(mFleetRenewFailures, prometheus.CounterValue, float64(s.RenewFailures))
}
