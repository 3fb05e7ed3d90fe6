// Package jetstreamsink is the bridge's durable sink: a bridge.Sink that
// stores every tag update in a replicated JetStream stream, exactly once by
// message ID (wire.MessageID), through broker maintenance, broker death,
// stream leader changes and source failover. It sets its stream up when
// the bridge starts (bridge.Binder), holds the source when its window of
// unacknowledged updates is full (backpressure, bridge.Aborter) and reports
// readiness, counters and stream health (bridge.StatusReporter).
// docs/jetstream.md describes the guarantees and the settings.
package jetstreamsink
