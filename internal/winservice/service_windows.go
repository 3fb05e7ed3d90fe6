//go:build windows

package winservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"
)

// IsService reports whether the process was started by the service
// control manager.
func IsService() (bool, error) { return svc.IsWindowsService() }

// Run runs r as the service name until the service control manager
// stops it, and returns the relay's error.
func Run(ctx context.Context, name string, r Relay, t Timing) error {
	h := &handler{ctx: ctx, r: r, t: t}
	if err := svc.Run(name, h); err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	return h.err
}

type handler struct {
	ctx context.Context
	r   Relay
	t   Timing
	err error // the relay's, set before Execute returns
}

// Execute implements svc.Handler.
func (h *handler) Execute(_ []string, reqs <-chan svc.ChangeRequest, changes chan<- svc.Status) (bool, uint32) {
	code, err := Execute(h.ctx, h.r, h.t, reqs, decode, func(s Status) { changes <- encode(s) })
	h.err = err
	return code != 0, code
}

func decode(r svc.ChangeRequest) Cmd {
	switch r.Cmd {
	case svc.Stop:
		return CmdStop
	case svc.Shutdown:
		return CmdShutdown
	case svc.Interrogate:
		return CmdInterrogate
	case svc.ParamChange:
		return CmdParamChange
	}
	return CmdOther
}

func encode(s Status) svc.Status {
	out := svc.Status{CheckPoint: s.CheckPoint, WaitHint: uint32(s.WaitHint / time.Millisecond)}
	switch s.State {
	case StateStartPending:
		out.State = svc.StartPending
	case StateRunning:
		out.State = svc.Running
	case StateStopPending:
		out.State = svc.StopPending
	}
	if s.Accepts&AcceptStop != 0 {
		out.Accepts |= svc.AcceptStop
	}
	if s.Accepts&AcceptShutdown != 0 {
		out.Accepts |= svc.AcceptShutdown
	}
	if s.Accepts&AcceptParamChange != 0 {
		out.Accepts |= svc.AcceptParamChange
	}
	return out
}

// OpenEventLog opens the Event Log source name for writing.
func OpenEventLog(name string) (*EventLogWriter, error) {
	l, err := eventlog.Open(name)
	if err != nil {
		return nil, fmt.Errorf("event log source %s: %w", name, err)
	}
	return NewEventLogWriter(l), nil
}

// Install creates the service of s, started automatically at boot and
// restarted by the service control manager when it fails (a non-zero
// exit too), and registers its Event Log source.
func Install(s Spec) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("service control manager: %w", err)
	}
	defer m.Disconnect()
	if old, err := m.OpenService(s.Name); err == nil {
		old.Close()
		return fmt.Errorf("service %s already exists (apbridge service uninstall --name %s first)", s.Name, s.Name)
	}
	sv, err := m.CreateService(s.Name, s.Exe, mgr.Config{
		DisplayName:      "apbridge relay (" + s.Name + ")",
		Description:      "Relays OPC UA and MxAccess gateway tags to NATS.",
		StartType:        mgr.StartAutomatic,
		DelayedAutoStart: true, // after the network is up
		ServiceStartName: s.Account,
	}, s.Args()...)
	if err != nil {
		return fmt.Errorf("create service %s: %w", s.Name, err)
	}
	defer sv.Close()
	restart := mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: 5 * time.Second}
	err = errors.Join(
		sv.SetRecoveryActions([]mgr.RecoveryAction{restart, restart, restart}, uint32((24*time.Hour).Seconds())),
		sv.SetRecoveryActionsOnNonCrashFailures(true),
	)
	if err == nil {
		err = eventlog.InstallAsEventCreate(s.Name, eventlog.Error|eventlog.Warning|eventlog.Info)
		if err != nil {
			err = fmt.Errorf("event log source %s: %w", s.Name, err)
		}
	}
	if err != nil {
		sv.Delete()
		return err
	}
	return nil
}

// Uninstall stops the service name if it runs (waiting as Stop does),
// deletes it and removes its Event Log source.
func Uninstall(ctx context.Context, name string) error {
	if err := Stop(ctx, name); err != nil && !errors.Is(err, errNotRunning) {
		return err
	}
	err := withService(name, func(sv *mgr.Service) error {
		if err := sv.Delete(); err != nil {
			return fmt.Errorf("delete service %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := eventlog.Remove(name); err != nil {
		return fmt.Errorf("event log source %s: %w", name, err)
	}
	return nil
}

// Start starts the service name and waits until it runs (the relay is
// connected to NATS) or ctx ends.
func Start(ctx context.Context, name string) error {
	return withService(name, func(sv *mgr.Service) error {
		if err := sv.Start(); err != nil {
			return fmt.Errorf("start service %s: %w", name, err)
		}
		return waitState(ctx, sv, svc.Running)
	})
}

var errNotRunning = errors.New("service not running")

// Stop stops the service name and waits until it stopped (the relay
// drained) or ctx ends.
func Stop(ctx context.Context, name string) error {
	return withService(name, func(sv *mgr.Service) error {
		st, err := sv.Query()
		if err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		if st.State == svc.Stopped {
			return errNotRunning
		}
		if _, err := sv.Control(svc.Stop); err != nil && !errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) {
			return fmt.Errorf("stop service %s: %w", name, err)
		}
		return waitState(ctx, sv, svc.Stopped)
	})
}

func withService(name string, f func(*mgr.Service) error) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("service control manager: %w", err)
	}
	defer m.Disconnect()
	sv, err := m.OpenService(name)
	if err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	defer sv.Close()
	return f(sv)
}

// waitState polls the service until it is in state want, it stopped on
// the way (the start failed), or ctx ends.
func waitState(ctx context.Context, sv *mgr.Service, want svc.State) error {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := sv.Query()
		if err != nil {
			return err
		}
		switch {
		case st.State == want:
			return nil
		case st.State == svc.Stopped:
			return fmt.Errorf("service stopped (exit code %d, service exit code %d): see its log", st.Win32ExitCode, st.ServiceSpecificExitCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service still in state %d: %w", st.State, ctx.Err())
		case <-t.C:
		}
	}
}
