//go:build !windows

package winservice

import "context"

// IsService reports false: only Windows has a service control manager.
func IsService() (bool, error) { return false, nil }

// Run returns ErrNotWindows.
func Run(context.Context, string, Relay, Timing) error { return ErrNotWindows }

// OpenEventLog returns ErrNotWindows.
func OpenEventLog(string) (*EventLogWriter, error) { return nil, ErrNotWindows }

// Install returns ErrNotWindows.
func Install(Spec) error { return ErrNotWindows }

// Uninstall returns ErrNotWindows.
func Uninstall(context.Context, string) error { return ErrNotWindows }

// Start returns ErrNotWindows.
func Start(context.Context, string) error { return ErrNotWindows }

// Stop returns ErrNotWindows.
func Stop(context.Context, string) error { return ErrNotWindows }
