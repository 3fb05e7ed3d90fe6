package opcuasource

import (
	"errors"
	"fmt"
	"time"

	"github.com/apbridge/apbridge/bridge"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
)

// Monitoring overrides a source's monitoring settings (its
// samplingIntervalMilliseconds, queueSize, discardOldest and filter) for a
// group of tags or for one tag. An unset field keeps the value of the
// level above: tag over group over source.
type Monitoring struct {
	SamplingIntervalMilliseconds *int                       `yaml:"samplingIntervalMilliseconds,omitempty" json:"samplingIntervalMilliseconds,omitempty"`
	QueueSize                    *int                       `yaml:"queueSize,omitempty" json:"queueSize,omitempty"`
	DiscardOldest                *bool                      `yaml:"discardOldest,omitempty" json:"discardOldest,omitempty"`
	Filter                       *uaclient.DataChangeFilter `yaml:"filter,omitempty" json:"filter,omitempty"`
}

// TagConfig is a tag of an OPC UA source: the bridge's tag fields and,
// optionally, its own monitoring settings.
type TagConfig struct {
	bridge.TagConfig `yaml:",inline"`
	Monitoring       `yaml:",inline"`
}

// TagGroup is a group of tags that share monitoring settings.
type TagGroup struct {
	// Name names the group in error messages.
	Name       string `yaml:"name,omitempty" json:"name,omitempty"`
	Monitoring `yaml:",inline"`
	Tags       []TagConfig `yaml:"tags" json:"tags"`
}

// Validate checks m's fields, each error prefixed with field.
func (m Monitoring) Validate(field string) error {
	var errs []error
	if v := m.SamplingIntervalMilliseconds; v != nil &&
		(*v < uaclient.MinSamplingIntervalMilliseconds || *v > uaclient.MaxSamplingIntervalMilliseconds) {
		errs = append(errs, &servicelevel.FieldError{Field: field + "samplingIntervalMilliseconds", Value: *v,
			Min: uaclient.MinSamplingIntervalMilliseconds, Max: uaclient.MaxSamplingIntervalMilliseconds})
	}
	if v := m.QueueSize; v != nil && (*v < uaclient.MinQueueSize || *v > uaclient.MaxQueueSize) {
		errs = append(errs, &servicelevel.FieldError{Field: field + "queueSize", Value: *v,
			Min: uaclient.MinQueueSize, Max: uaclient.MaxQueueSize})
	}
	if m.Filter != nil {
		if err := m.Filter.Validate(field + "filter"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Over returns m with the fields it leaves unset taken from base.
func (m Monitoring) Over(base Monitoring) Monitoring {
	if m.SamplingIntervalMilliseconds == nil {
		m.SamplingIntervalMilliseconds = base.SamplingIntervalMilliseconds
	}
	if m.QueueSize == nil {
		m.QueueSize = base.QueueSize
	}
	if m.DiscardOldest == nil {
		m.DiscardOldest = base.DiscardOldest
	}
	if m.Filter == nil {
		m.Filter = base.Filter
	}
	return m
}

// IsZero reports whether m overrides nothing.
func (m Monitoring) IsZero() bool {
	return m.SamplingIntervalMilliseconds == nil && m.QueueSize == nil && m.DiscardOldest == nil && m.Filter == nil
}

// apply sets m's overrides on it.
func (m Monitoring) apply(it *uaclient.Item) {
	if v := m.SamplingIntervalMilliseconds; v != nil {
		// 0 asks the server for its fastest rate; the Item takes only a
		// positive override, so the fastest is 1 ms here.
		it.SamplingInterval = max(time.Duration(*v)*time.Millisecond, time.Millisecond)
	}
	if v := m.QueueSize; v != nil {
		it.QueueSize = uint32(*v)
	}
	it.DiscardOldest = m.DiscardOldest
	it.Filter = m.Filter
}

// WithMonitoring sets monitoring overrides by tag name (a relay works
// them out from its tags and groups).
func WithMonitoring(byTag map[string]Monitoring) Option {
	return func(o *options) error {
		for name, m := range byTag {
			if err := m.Validate(fmt.Sprintf("tag %q: ", name)); err != nil {
				return err
			}
		}
		o.monitoring = byTag
		return nil
	}
}
