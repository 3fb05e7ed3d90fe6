package winservice

import (
	"strings"

	"github.com/rs/zerolog"
)

// EventLog is what the writer needs of an event source: the methods of
// eventlog.Log.
type EventLog interface {
	Info(eid uint32, msg string) error
	Warning(eid uint32, msg string) error
	Error(eid uint32, msg string) error
	Close() error
}

// The event IDs the relay writes, one per level, so that an Event Viewer
// filter or a collector can select by ID: 1 information (info, debug),
// 2 warning, 3 error (error, fatal, panic).
const (
	EventInfo    uint32 = 1
	EventWarning uint32 = 2
	EventError   uint32 = 3
)

// EventLogWriter writes the relay's log lines to an event log, each as one
// event of the type of its level. It is a zerolog.LevelWriter: the logger
// hands it the level with each line, so nothing is parsed.
type EventLogWriter struct {
	l EventLog
}

// NewEventLogWriter returns a writer to l; Close closes l.
func NewEventLogWriter(l EventLog) *EventLogWriter { return &EventLogWriter{l: l} }

// Write writes a line that came without a level as information.
func (w *EventLogWriter) Write(p []byte) (int, error) {
	return w.WriteLevel(zerolog.InfoLevel, p)
}

// WriteLevel writes p as one event: an error for error and above, a
// warning for warn, information otherwise.
func (w *EventLogWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\r\n")
	var err error
	switch {
	case level == zerolog.ErrorLevel, level == zerolog.FatalLevel, level == zerolog.PanicLevel:
		err = w.l.Error(EventError, msg)
	case level == zerolog.WarnLevel:
		err = w.l.Warning(EventWarning, msg)
	default:
		err = w.l.Info(EventInfo, msg)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close closes the event log.
func (w *EventLogWriter) Close() error { return w.l.Close() }
