package wire

import "github.com/nats-io/nats.go/micro"

// The defaults of a relay's configuration that decide where its messages
// go and what its services are called, so that a consumer of a relay
// configured without them can find it. The relay applies these same
// constants.
const (
	// DefaultPrefix starts the subjects of a relay's services (service.prefix).
	DefaultPrefix = "apbridge"
	// DefaultSubject is the template of tag subjects (subject; see Mapper).
	DefaultSubject = "apbridge.{source}.{tag}"
	// DefaultInstance names a relay in its status and in its micro
	// service's metadata (instance).
	DefaultInstance = "apbridge"
	// DefaultServiceName is the name of a relay's NATS micro service
	// (service.name), which `nats micro ls` lists.
	DefaultServiceName = "apbridge"
)

// StatusSubject is where a relay with the service prefix prefix answers
// status requests.
func StatusSubject(prefix string) string { return prefix + ".status" }

// SnapshotSubject is where a relay answers snapshot requests: the last
// update of every tag, a page at a time.
func SnapshotSubject(prefix string) string { return prefix + ".snapshot" }

// WriteSubject is where a write request for the tag published on
// tagSubject goes.
func WriteSubject(prefix, tagSubject string) string { return prefix + ".write." + tagSubject }

// EventSubject is where a relay publishes the events of source: the
// framing of a refresh, and its health when it changes.
func EventSubject(prefix, source string) string { return prefix + eventsInfix + EscapeToken(source) }

// ConfigSubject is where a relay's config service answers op: "get" (the
// running config, secrets redacted, and its version), "validate" (check
// a proposed config), "diff" (the plan applying it would make: a dry
// run) and "apply" (apply it live).
func ConfigSubject(prefix, op string) string { return prefix + ".config." + op }

// eventsInfix joins the prefix and a source's token in an event subject.
const eventsInfix = ".events."

// ServiceSubjects returns every subject a relay's services listen or
// publish on: StatusSubject, SnapshotSubject, the WriteSubject and
// EventSubject of every tag and source (<prefix>.write.> and
// <prefix>.events.>), and the NATS micro service's discovery subjects
// ($SRV.>). A tag subject, a subject template's result or a stream subject
// must not overlap any of them: the relay's own updates would arrive as
// its requests (with a writable tag, as writes to the plant), or a stream
// would store its requests and replies.
func ServiceSubjects(prefix string) []string {
	return []string{
		StatusSubject(prefix),
		SnapshotSubject(prefix),
		WriteSubject(prefix, ">"),
		prefix + eventsInfix + ">",
		prefix + ".config.>",
		micro.APIPrefix + ".>",
	}
}
