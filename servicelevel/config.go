package servicelevel

import (
	"errors"
	"fmt"
	"time"
)

// Defaults and ranges of FailoverConfig. The ServiceLevel ones and the slow
// retry timing are those of the ServiceLevel-aware failover design; the
// fast retry timing is ours.
const (
	DefaultDegradedWindowSeconds = 10
	MinDegradedWindowSeconds     = 1
	MaxDegradedWindowSeconds     = 3600

	DefaultMinDwellSeconds = 60
	MinMinDwellSeconds     = 0
	MaxMinDwellSeconds     = 86400

	DefaultFailoverRetryCount = 3
	MinFailoverRetryCount     = 1
	MaxFailoverRetryCount     = 100

	DefaultReconnectDelaySeconds = 5
	MinReconnectDelaySeconds     = 1
	MaxReconnectDelaySeconds     = 3600

	DefaultConnectTimeoutSeconds = 10
	MinConnectTimeoutSeconds     = 1
	MaxConnectTimeoutSeconds     = 300

	DefaultFastRetryIntervalMilliseconds = 100
	MinFastRetryIntervalMilliseconds     = 0
	MaxFastRetryIntervalMilliseconds     = 10000

	DefaultFastConnectTimeoutMilliseconds = 500
	MinFastConnectTimeoutMilliseconds     = 50
	MaxFastConnectTimeoutMilliseconds     = 10000
)

// ServiceLevelFailover is the per-connection block of the
// ServiceLevel-aware failover design, "serviceLevelFailover": {"enabled",
// "degradedWindowSeconds", "minDwellSeconds"}. Fields are pointers so that
// a field that is absent or null takes its default while an explicit 0 or
// false is kept (and, for the window, rejected): a config written before a
// knob existed must keep working, and a typo'd 0 must not silently mean
// "default".
type ServiceLevelFailover struct {
	// Enabled turns ServiceLevel-triggered probes and switches, and the
	// fast retries, on. Default true: a level of 200 or more never starts a
	// streak, so pairs that only ever report Healthy levels behave as
	// before.
	Enabled *bool `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	// DegradedWindowSeconds is how long the active level must stay below
	// 200 before the peer is probed, and the minimum time between two
	// probes of one streak. Default 10, valid 1-3600.
	DegradedWindowSeconds *int `json:"degradedWindowSeconds,omitempty" yaml:"degradedWindowSeconds,omitempty"`
	// MinDwellSeconds is the anti-flap dwell: no ServiceLevel switch within
	// this long after the previous one. Default 60, valid 0-86400.
	MinDwellSeconds *int `json:"minDwellSeconds,omitempty" yaml:"minDwellSeconds,omitempty"`
}

// FailoverConfig is the failover configuration of one OPC UA endpoint pair
// as written in a config file (JSON or YAML). The zero value, like any
// absent or null field, means the defaults. Validate it, or let NewPolicy
// do so; Settings gives the resolved values.
type FailoverConfig struct {
	// ServiceLevelFailover is that design's block; absent or null means
	// its defaults.
	ServiceLevelFailover *ServiceLevelFailover `json:"serviceLevelFailover,omitempty" yaml:"serviceLevelFailover,omitempty"`
	// FailoverRetryCount is how many connect attempts on an endpoint fail
	// before the connection moves to the other one. Default 3, valid 1-100.
	FailoverRetryCount *int `json:"failoverRetryCount,omitempty" yaml:"failoverRetryCount,omitempty"`
	// ReconnectDelaySeconds is the wait before each connect attempt of the
	// slow retry cycle (the connectivity failover that predates ServiceLevel).
	// Default 5, valid 1-3600.
	ReconnectDelaySeconds *int `json:"reconnectDelaySeconds,omitempty" yaml:"reconnectDelaySeconds,omitempty"`
	// ConnectTimeoutSeconds bounds one connect attempt of the slow cycle,
	// and any connect to the other endpoint after a switch. Default 10,
	// valid 1-300.
	ConnectTimeoutSeconds *int `json:"connectTimeoutSeconds,omitempty" yaml:"connectTimeoutSeconds,omitempty"`
	// FastRetryIntervalMilliseconds replaces the reconnect delay while the
	// standby's live session reports Healthy. Default 100, valid 0-10000.
	FastRetryIntervalMilliseconds *int `json:"fastRetryIntervalMilliseconds,omitempty" yaml:"fastRetryIntervalMilliseconds,omitempty"`
	// FastConnectTimeoutMilliseconds replaces the connect timeout in the
	// same case. Default 500, valid 50-10000.
	FastConnectTimeoutMilliseconds *int `json:"fastConnectTimeoutMilliseconds,omitempty" yaml:"fastConnectTimeoutMilliseconds,omitempty"`
}

// Settings are a validated FailoverConfig with defaults applied and
// durations as time.Duration: what the Policy runs on, and what a
// supervisor logs at start-up.
type Settings struct {
	Enabled            bool          // serviceLevelFailover.enabled
	DegradedWindow     time.Duration // serviceLevelFailover.degradedWindowSeconds
	MinDwell           time.Duration // serviceLevelFailover.minDwellSeconds
	RetryCount         int           // failoverRetryCount
	ReconnectDelay     time.Duration // reconnectDelaySeconds
	ConnectTimeout     time.Duration // connectTimeoutSeconds
	FastRetryInterval  time.Duration // fastRetryIntervalMilliseconds
	FastConnectTimeout time.Duration // fastConnectTimeoutMilliseconds
}

// FieldError is one invalid field. Field is the path as written in the
// config (for example "serviceLevelFailover.degradedWindowSeconds") so that
// a parent config can prefix its own path and the user can find the line.
type FieldError struct {
	Field    string
	Value    int
	Min, Max int // the valid range, inclusive
}

// Error renders "field: value is out of range (valid min-max)".
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %d is out of range (valid %d-%d)", e.Field, e.Value, e.Min, e.Max)
}

// Validate reports every invalid field at once, joined with errors.Join,
// each a *FieldError; nil means the config is usable.
func (c FailoverConfig) Validate() error {
	_, err := c.Settings()
	return err
}

// Settings validates c and resolves its defaults.
func (c FailoverConfig) Settings() (Settings, error) {
	var errs []error
	resolve := func(field string, p *int, def, lo, hi int) int {
		if p == nil {
			return def
		}
		if *p < lo || *p > hi {
			errs = append(errs, &FieldError{Field: field, Value: *p, Min: lo, Max: hi})
			return def
		}
		return *p
	}

	slf := ServiceLevelFailover{}
	if c.ServiceLevelFailover != nil {
		slf = *c.ServiceLevelFailover
	}
	s := Settings{Enabled: slf.Enabled == nil || *slf.Enabled}
	s.DegradedWindow = time.Second * time.Duration(resolve("serviceLevelFailover.degradedWindowSeconds",
		slf.DegradedWindowSeconds, DefaultDegradedWindowSeconds, MinDegradedWindowSeconds, MaxDegradedWindowSeconds))
	s.MinDwell = time.Second * time.Duration(resolve("serviceLevelFailover.minDwellSeconds",
		slf.MinDwellSeconds, DefaultMinDwellSeconds, MinMinDwellSeconds, MaxMinDwellSeconds))
	s.RetryCount = resolve("failoverRetryCount",
		c.FailoverRetryCount, DefaultFailoverRetryCount, MinFailoverRetryCount, MaxFailoverRetryCount)
	s.ReconnectDelay = time.Second * time.Duration(resolve("reconnectDelaySeconds",
		c.ReconnectDelaySeconds, DefaultReconnectDelaySeconds, MinReconnectDelaySeconds, MaxReconnectDelaySeconds))
	s.ConnectTimeout = time.Second * time.Duration(resolve("connectTimeoutSeconds",
		c.ConnectTimeoutSeconds, DefaultConnectTimeoutSeconds, MinConnectTimeoutSeconds, MaxConnectTimeoutSeconds))
	s.FastRetryInterval = time.Millisecond * time.Duration(resolve("fastRetryIntervalMilliseconds",
		c.FastRetryIntervalMilliseconds, DefaultFastRetryIntervalMilliseconds, MinFastRetryIntervalMilliseconds, MaxFastRetryIntervalMilliseconds))
	s.FastConnectTimeout = time.Millisecond * time.Duration(resolve("fastConnectTimeoutMilliseconds",
		c.FastConnectTimeoutMilliseconds, DefaultFastConnectTimeoutMilliseconds, MinFastConnectTimeoutMilliseconds, MaxFastConnectTimeoutMilliseconds))
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	return s, nil
}
