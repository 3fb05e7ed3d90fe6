package wire

// ServiceSubjects returns the subjects the bridge's own services listen
// on for prefix: <prefix>.status, .snapshot, .write.> and .events.>, and
// the micro service's $SRV.>. A tag subject, a subject template's result
// or a stream subject must not overlap any of them: the relay's own
// updates would arrive as requests, and with a writable tag as writes.
func ServiceSubjects(prefix string) []string {
	return []string{prefix + ".status", prefix + ".snapshot", prefix + ".write.>", prefix + ".events.>", "$SRV.>"}
}
