package servicelevel_test

import (
	"fmt"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
)

// A supervisor feeds the Policy what its sessions report and executes
// what comes back. Here the Warm primary stops gracefully: it publishes
// ServiceLevel 0 while the backup has already promoted itself to 250.
func ExamplePolicy() {
	p, err := servicelevel.NewPolicy(servicelevel.FailoverConfig{})
	if err != nil {
		panic(err)
	}
	start := time.Date(2026, 11, 13, 13, 52, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	show := func(d servicelevel.Decision) servicelevel.Decision {
		for _, o := range d.Observations {
			fmt.Println("  event:", o)
		}
		if d.Action != servicelevel.ActionNone {
			fmt.Println("do:", d)
		}
		return d
	}

	// Both sessions come up: the backup is the Warm standby (90).
	show(p.StandbyLevel(at(0), servicelevel.LevelOf(90)))
	show(p.Start(at(0)))
	show(p.SessionUp(at(0.01)))
	show(p.ActiveLevel(at(0.01), servicelevel.LevelOf(250)))

	// The backup promotes, the primary announces its stop.
	show(p.StandbyLevel(at(9.9), servicelevel.LevelOf(250)))
	probe := show(p.ActiveLevel(at(10), servicelevel.LevelOf(0)))

	// The supervisor reads the backup's live level and answers.
	show(p.ProbeResult(at(10.002), probe.Probe, servicelevel.LevelOf(250)))
	show(p.SessionUp(at(10.003)))
	fmt.Println("active:", p.Active())

	// Output:
	//   event: backup (standby) reports ServiceLevel 90 (Unknown -> Degraded)
	// do: connect primary (startup, attempt 1, dial timeout 10s)
	//   event: primary (active) reports ServiceLevel 250 (Unknown -> Healthy)
	//   event: backup (standby) reports ServiceLevel 250 (Degraded -> Healthy)
	//   event: primary (active) reports ServiceLevel 0 (Healthy -> Maintenance)
	//   event: primary reports ServiceLevel 0 (Maintenance, < 200): degraded streak started
	//   event: probing backup (probe 1, ServiceLevel 0)
	// do: probe backup (ServiceLevel 0)
	//   event: probe 1: backup reports 250
	//   event: primary degraded streak cleared (session ended)
	// do: failover from primary to backup (ServiceLevel 0; backup reports 250)
	// active: backup
}

// Validation names every bad field with its range.
func ExampleFailoverConfig_Validate() {
	cfg := servicelevel.FailoverConfig{
		ServiceLevelFailover: &servicelevel.ServiceLevelFailover{DegradedWindowSeconds: new(0)},
		FailoverRetryCount:   new(0),
	}
	fmt.Println(cfg.Validate())

	// Output:
	// serviceLevelFailover.degradedWindowSeconds: 0 is out of range (valid 1-3600)
	// failoverRetryCount: 0 is out of range (valid 1-100)
}
