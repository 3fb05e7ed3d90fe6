package main

import (
	"fmt"
	"io"
	"os"

	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/winservice"
)

// logSink is where the relay's log lines go: stderr (the default, what
// systemd's journal and a container engine collect), a file, or the
// Windows Event Log.
type logSink struct {
	w     io.Writer
	close func() error
	// name says where, for the log's first line and the tests: "stderr",
	// "file PATH", "event log SOURCE".
	name string
}

// Close closes the file or the event log.
func (s logSink) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// separate reports whether the log goes somewhere other than stderr: then
// what the run command prints on stderr before its logger exists (a
// refused config) is logged too, or it would be lost under a service
// manager that discards stderr.
func (s logSink) separate() bool { return s.name != "stderr" }

// openLogSink picks the sink of the run command's flags: --log-file or
// --event-log (not both); neither means stderr, except for a Windows
// service, whose stderr goes nowhere: it logs to the Event Log source of
// the default service name. openEventLog opens an Event Log source
// (winservice.OpenEventLog; tests pass their own).
func openLogSink(file, eventSource string, asService bool, stderr io.Writer,
	openEventLog func(string) (io.WriteCloser, error)) (logSink, error) {
	if file != "" && eventSource != "" {
		return logSink{}, cli.Usagef("--log-file and --event-log: give one of them (the log goes to one place)")
	}
	if file == "" && eventSource == "" && asService {
		eventSource = winservice.DefaultName
	}
	switch {
	case file != "":
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return logSink{}, fmt.Errorf("--log-file: %w", err)
		}
		return logSink{w: f, close: f.Close, name: "file " + file}, nil
	case eventSource != "":
		if err := winservice.CheckName("--event-log", eventSource); err != nil {
			return logSink{}, cli.Usagef("%v", err)
		}
		l, err := openEventLog(eventSource)
		if err != nil {
			return logSink{}, fmt.Errorf("--event-log: %w", err)
		}
		return logSink{w: l, close: l.Close, name: "event log " + eventSource}, nil
	}
	return logSink{w: stderr, name: "stderr"}, nil
}

// openEventLog opens a Windows Event Log source.
func openEventLog(source string) (io.WriteCloser, error) {
	w, err := winservice.OpenEventLog(source)
	if err != nil {
		return nil, err
	}
	return w, nil
}
