package winservice

import (
	"fmt"
	"time"
)

// DefaultName is the service's name, and its Event Log source's, unless
// the operator gives another (one service per relay on a host).
const DefaultName = "apbridge"

// Spec is a service to install: the relay binary and the command line the
// service control manager starts it with.
type Spec struct {
	// Name is the service's name and its Event Log source's.
	Name string
	// Exe is the absolute path of the relay binary.
	Exe string
	// Config is the absolute path of the config file: a service starts
	// in the system directory, where a relative path means nothing.
	Config string
	// LogFile is the file the relay logs to; empty for the Event Log.
	LogFile string
	// Drain is the run command's --drain-timeout; 0 for its default.
	Drain time.Duration
	// Account runs the service as this account (a virtual account such
	// as `NT SERVICE\apbridge`, or a managed service account); empty for
	// LocalSystem.
	Account string
}

// Args is the command line after the binary: the run command with the
// config, the log sink and the drain timeout.
func (s Spec) Args() []string {
	args := []string{"run", "--config", s.Config}
	if s.LogFile != "" {
		args = append(args, "--log-file", s.LogFile)
	} else {
		args = append(args, "--event-log", s.Name)
	}
	if s.Drain > 0 {
		args = append(args, "--drain-timeout", s.Drain.String())
	}
	return args
}

// CheckName checks a service or Event Log source name given as field (a
// flag): 1 to 80 letters, digits, '-', '_' or '.', so that it is valid as
// either and needs no quoting on a command line.
func CheckName(field, name string) error {
	if name == "" || len(name) > 80 {
		return fmt.Errorf("%s: %q is out of range (valid: 1-80 characters of letters, digits, '-', '_', '.')", field, name)
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("%s: %q holds %q at byte %d (valid: letters, digits, '-', '_', '.')", field, name, c, i)
		}
	}
	return nil
}
