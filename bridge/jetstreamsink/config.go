package jetstreamsink

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/apbridge/apbridge/wire"
	"github.com/nats-io/jsm.go/api"
)

// Config configures the JetStream sink: the stream it stores
// updates in (created from these settings if missing, refused if an existing
// one differs, never changed) and the publishing window. The zero value of
// a field means its default; docs/jetstream.md describes each.
type Config struct {
	// Stream is the stream's name. Default "APBRIDGE".
	Stream string `yaml:"stream,omitempty" json:"stream,omitempty"`
	// Domain is the JetStream domain the stream lives in: the sink sends
	// its JetStream API requests (create, check, health) to
	// $JS.<domain>.API, the API of that domain alone, whichever server of
	// the domain or joined to it by leaf node connections the relay is
	// connected to. At an edge site it is the site's domain
	// (docs/edge.md). Default: none, the JetStream of the servers the
	// relay is connected to. Letters, digits, '-' and '_', 1-64
	// characters.
	Domain string `yaml:"domain,omitempty" json:"domain,omitempty"`
	// Subjects the stream captures. They must cover every tag subject of
	// the bridge and none of its service subjects (<prefix>.status,
	// .snapshot, .write.>, .events.>). Default: worked out at Start from
	// the tags, one "<common prefix of a source's tag subjects>.>" per
	// source, e.g. "apbridge.line1.>".
	Subjects []string `yaml:"subjects,omitempty" json:"subjects,omitempty"`
	// Replicas is the stream's replica count, 1-5. Default 3 (R3: one
	// broker may be down or in maintenance without losing writes).
	Replicas int `yaml:"replicas,omitempty" json:"replicas,omitempty"`
	// Storage is "file" (default) or "memory".
	Storage string `yaml:"storage,omitempty" json:"storage,omitempty"`
	// Retention is "limits" (default), "interest" or "workqueue".
	Retention string `yaml:"retention,omitempty" json:"retention,omitempty"`
	// Discard is what the stream does at a limit: "old" (default) drops
	// the oldest messages, "new" refuses new ones (the sink then retries
	// and applies backpressure until there is room).
	Discard string `yaml:"discard,omitempty" json:"discard,omitempty"`
	// DuplicateWindow is how long the stream remembers message IDs to drop
	// repeats: it must cover the longest republish delay (a switch plus
	// AckTimeout, and the lag between hot-hot relays). 100ms-24h, default
	// 2m. Memory on each broker grows with it: about 100 bytes per update
	// stored within the window.
	DuplicateWindow time.Duration `yaml:"duplicateWindow,omitempty" json:"duplicateWindow,omitempty"`
	// MaxAge, MaxBytes, MaxMsgs, MaxMsgsPerSubject and MaxMsgSize are the
	// stream's limits; 0 means no limit.
	MaxAge            time.Duration `yaml:"maxAge,omitempty" json:"maxAge,omitempty"`
	MaxBytes          int64         `yaml:"maxBytes,omitempty" json:"maxBytes,omitempty"`
	MaxMsgs           int64         `yaml:"maxMsgs,omitempty" json:"maxMsgs,omitempty"`
	MaxMsgsPerSubject int64         `yaml:"maxMsgsPerSubject,omitempty" json:"maxMsgsPerSubject,omitempty"`
	MaxMsgSize        int32         `yaml:"maxMsgSize,omitempty" json:"maxMsgSize,omitempty"`

	// MaxPending bounds the updates published but not yet acknowledged by
	// the stream, 1-1000000, default 4096. When the window is full,
	// Publish blocks: backpressure toward the source.
	MaxPending int `yaml:"maxPending,omitempty" json:"maxPending,omitempty"`
	// MaxPendingBytes bounds the same window in bytes, 1 KiB-1 GiB,
	// default 16 MiB.
	MaxPendingBytes int `yaml:"maxPendingBytes,omitempty" json:"maxPendingBytes,omitempty"`
	// AckTimeout is how long a publish waits for its acknowledgement
	// before it is sent again, 100ms-1m, default 2s.
	AckTimeout time.Duration `yaml:"ackTimeout,omitempty" json:"ackTimeout,omitempty"`

	// HealthInterval is how often stream health and connection RTT are
	// checked, 100ms-10m, default 5s.
	HealthInterval time.Duration `yaml:"healthInterval,omitempty" json:"healthInterval,omitempty"`
	// RTTWarning and RTTCritical are the connection round-trip thresholds
	// of the health check; over RTTCritical the sink is not ready.
	// Defaults 250ms and 1s; 0 < warning <= critical <= 1m.
	RTTWarning  time.Duration `yaml:"rttWarning,omitempty" json:"rttWarning,omitempty"`
	RTTCritical time.Duration `yaml:"rttCritical,omitempty" json:"rttCritical,omitempty"`
	// ReplicaLagCritical is how many operations a replica may be behind
	// the leader before the stream counts as unhealthy, default 100000.
	ReplicaLagCritical uint64 `yaml:"replicaLagCritical,omitempty" json:"replicaLagCritical,omitempty"`
	// ReplicaSeenCritical is how long a replica may go unseen by the
	// leader before the stream counts as unhealthy, 1s-1h, default 10s.
	ReplicaSeenCritical time.Duration `yaml:"replicaSeenCritical,omitempty" json:"replicaSeenCritical,omitempty"`
}

// DefaultConfig returns the defaults of every field.
func DefaultConfig() Config {
	var c Config
	c.setDefaults()
	return c
}

// WithDefaults returns c with the defaults applied to its zero fields.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.Stream == "" {
		c.Stream = "APBRIDGE"
	}
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Storage == "" {
		c.Storage = "file"
	}
	if c.Retention == "" {
		c.Retention = "limits"
	}
	if c.Discard == "" {
		c.Discard = "old"
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.MaxPending == 0 {
		c.MaxPending = 4096
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = 16 << 20
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 2 * time.Second
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 5 * time.Second
	}
	if c.RTTWarning == 0 {
		c.RTTWarning = 250 * time.Millisecond
	}
	if c.RTTCritical == 0 {
		c.RTTCritical = time.Second
	}
	if c.ReplicaLagCritical == 0 {
		c.ReplicaLagCritical = 100000
	}
	if c.ReplicaSeenCritical == 0 {
		c.ReplicaSeenCritical = 10 * time.Second
	}
}

// Validate checks every field after applying the defaults. An error names
// the field as it is spelled in YAML and the allowed values.
func (c Config) Validate() error {
	c.setDefaults()
	_, err := c.validated()
	return err
}

// validated checks c (defaults applied) and returns the stream
// configuration it asks for. It reports every problem at once (joined,
// errors.Join), each naming the field as spelled in YAML and the allowed
// values: an operator fixes them all in one go.
func (c Config) validated() (api.StreamConfig, error) {
	var errs []error
	bad := func(field string, format string, a ...any) {
		errs = append(errs, fmt.Errorf("jetstream.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if strings.ContainsAny(c.Stream, ">*. /\\") || strings.IndexFunc(c.Stream, unicode.IsControl) >= 0 || len(c.Stream) > 255 {
		bad("stream", "%q is not a stream name (1-255 characters, none of . * > / \\, spaces or control characters)", c.Stream)
	}
	if c.Domain != "" && !ValidDomain(c.Domain) {
		bad("domain", "%q is not a JetStream domain (valid: letters, digits, '-' and '_', 1-64 characters; leave it out for the connected servers' JetStream)", c.Domain)
	}
	for i, s := range c.Subjects {
		if err := wire.ValidatePattern(s); err != nil {
			bad(fmt.Sprintf("subjects[%d]", i), "%v", err)
		} else if r, ok := wire.Reserved(s); ok {
			// The server takes a stream on $JS.API.> for its own API,
			// and one on $KV.> or _INBOX.> would store other clients'
			// writes and replies.
			bad(fmt.Sprintf("subjects[%d]", i), "%q captures subjects in the reserved subject space %s: a stream stores tag updates only (give it subjects under the tags' own root, e.g. plant.>)", s, r)
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		bad("replicas", "%d is out of range (valid 1-5)", c.Replicas)
	}
	storage := map[string]api.StorageType{"file": api.FileStorage, "memory": api.MemoryStorage}
	st, ok := storage[c.Storage]
	if !ok {
		bad("storage", "%q is not a storage type (valid: file, memory)", c.Storage)
	}
	retention := map[string]api.RetentionPolicy{"limits": api.LimitsPolicy, "interest": api.InterestPolicy, "workqueue": api.WorkQueuePolicy}
	rt, ok := retention[c.Retention]
	if !ok {
		bad("retention", "%q is not a retention policy (valid: limits, interest, workqueue)", c.Retention)
	}
	discard := map[string]api.DiscardPolicy{"old": api.DiscardOld, "new": api.DiscardNew}
	dp, ok := discard[c.Discard]
	if !ok {
		bad("discard", "%q is not a discard policy (valid: old, new)", c.Discard)
	}
	windowOK := c.DuplicateWindow >= 100*time.Millisecond && c.DuplicateWindow <= 24*time.Hour
	if !windowOK {
		bad("duplicateWindow", "%v is out of range (valid 100ms-24h)", c.DuplicateWindow)
	}
	switch {
	case c.MaxAge < 0:
		bad("maxAge", "%v is negative (valid: 0 for no limit, or at least the duplicate window)", c.MaxAge)
	case c.MaxAge > 0 && windowOK && c.MaxAge < c.DuplicateWindow:
		bad("maxAge", "%v is shorter than duplicateWindow %v (valid: 0 for no limit, or at least the duplicate window)", c.MaxAge, c.DuplicateWindow)
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"maxBytes", c.MaxBytes}, {"maxMsgs", c.MaxMsgs}, {"maxMsgsPerSubject", c.MaxMsgsPerSubject}, {"maxMsgSize", int64(c.MaxMsgSize)}} {
		if l.v < 0 {
			bad(l.name, "%d is negative (valid: 0 for no limit, or positive)", l.v)
		}
	}
	if c.MaxPending < 1 || c.MaxPending > 1000000 {
		bad("maxPending", "%d is out of range (valid 1-1000000)", c.MaxPending)
	}
	if c.MaxPendingBytes < 1024 || c.MaxPendingBytes > 1<<30 {
		bad("maxPendingBytes", "%d is out of range (valid 1024-1073741824)", c.MaxPendingBytes)
	}
	if c.AckTimeout < 100*time.Millisecond || c.AckTimeout > time.Minute {
		bad("ackTimeout", "%v is out of range (valid 100ms-1m)", c.AckTimeout)
	}
	if c.HealthInterval < 100*time.Millisecond || c.HealthInterval > 10*time.Minute {
		bad("healthInterval", "%v is out of range (valid 100ms-10m)", c.HealthInterval)
	}
	criticalOK := c.RTTCritical > 0 && c.RTTCritical <= time.Minute
	if !criticalOK {
		bad("rttCritical", "%v is out of range (valid above 0 up to 1m)", c.RTTCritical)
	}
	if c.RTTWarning <= 0 || criticalOK && c.RTTWarning > c.RTTCritical {
		bad("rttWarning", "%v is out of range (valid above 0 up to rttCritical %v)", c.RTTWarning, c.RTTCritical)
	}
	if c.ReplicaSeenCritical < time.Second || c.ReplicaSeenCritical > time.Hour {
		bad("replicaSeenCritical", "%v is out of range (valid 1s-1h)", c.ReplicaSeenCritical)
	}
	if len(errs) > 0 {
		return api.StreamConfig{}, errors.Join(errs...)
	}
	limit := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	sc := api.StreamConfig{
		Name:         c.Stream,
		Description:  "tag updates stored by apbridge",
		Subjects:     append([]string(nil), c.Subjects...),
		Retention:    rt,
		MaxConsumers: -1,
		MaxMsgsPer:   limit(c.MaxMsgsPerSubject),
		MaxMsgs:      limit(c.MaxMsgs),
		MaxBytes:     limit(c.MaxBytes),
		MaxAge:       c.MaxAge,
		MaxMsgSize:   int32(limit(int64(c.MaxMsgSize))),
		Storage:      st,
		Discard:      dp,
		Replicas:     c.Replicas,
		Duplicates:   c.DuplicateWindow,
	}
	return sc, nil
}

// ValidDomain reports whether d can name a JetStream domain in the
// relay's configuration: 1-64 letters, digits, '-' and '_'. nats-server
// takes any subject token; the relay keeps to names that read the same in
// a subject, a file and a metric label.
func ValidDomain(d string) bool {
	if d == "" || len(d) > 64 {
		return false
	}
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
