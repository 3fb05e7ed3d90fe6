package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/winservice"
	"github.com/apbridge/apbridge/relay"
)

// serviceVerbs are the subcommands of `apbridge service`.
var serviceVerbs = []string{"install", "uninstall", "start", "stop"}

// serviceAction is a parsed `apbridge service VERB` command line.
type serviceAction struct {
	verb string
	// spec is the service to install (install); its Name is every
	// verb's service.
	spec winservice.Spec
	// wait bounds start and stop (and the stop of uninstall).
	wait time.Duration
}

// parseService parses `apbridge service VERB [flags]`. Paths are made
// absolute here: the service control manager starts the relay in the
// system directory.
func parseService(args []string, stdout, stderr io.Writer) (serviceAction, error) {
	if len(args) == 0 {
		return serviceAction{}, cli.Usagef("service: give one of install, uninstall, start, stop (e.g. apbridge service install --config C:\\apbridge\\site.yaml)")
	}
	a := serviceAction{verb: args[0]}
	if !slices.Contains(serviceVerbs, a.verb) {
		return serviceAction{}, cli.Usagef("service: unknown subcommand %q (valid: %s)", a.verb, strings.Join(serviceVerbs, ", "))
	}
	fs := flag.NewFlagSet("service "+a.verb, flag.ContinueOnError)
	fs.StringVar(&a.spec.Name, "name", winservice.DefaultName, "the service's name (and its Event Log source's): one service per relay on a host")
	var drain time.Duration
	if a.verb == "install" {
		fs.StringVar(&a.spec.Config, "config", "", "the config file (YAML); checked now, as apbridge validate does")
		fs.StringVar(&a.spec.LogFile, "log-file", "", "log to this file instead of the Event Log")
		fs.DurationVar(&drain, "drain-timeout", relay.DefaultDrainTimeout, "the run command's --drain-timeout: how long a stop waits for what was received to be confirmed")
		fs.StringVar(&a.spec.Account, "account", "", `run as this account, e.g. a virtual account "NT SERVICE\apbridge" (default LocalSystem)`)
	} else {
		def := 2 * time.Minute // a start waits for NATS, a stop for the drain
		fs.DurationVar(&a.wait, "timeout", def, "how long to wait for the service to run (start) or to stop (stop, uninstall)")
	}
	if err := cli.Parse(fs, args[1:], stdout, stderr); err != nil {
		return serviceAction{}, err
	}
	if err := winservice.CheckName("--name", a.spec.Name); err != nil {
		return serviceAction{}, cli.Usagef("%v", err)
	}
	if a.verb != "install" {
		if a.wait <= 0 {
			return serviceAction{}, cli.Usagef("--timeout: %v is out of range (valid: more than 0, e.g. 2m)", a.wait)
		}
		return a, nil
	}
	if a.spec.Config == "" {
		return serviceAction{}, cli.Usagef("--config is required")
	}
	if drain <= 0 {
		return serviceAction{}, cli.Usagef("--drain-timeout: %v is out of range (valid: more than 0, e.g. 30s)", drain)
	}
	if drain != relay.DefaultDrainTimeout {
		a.spec.Drain = drain
	}
	var err error
	if a.spec.Config, err = filepath.Abs(a.spec.Config); err != nil {
		return serviceAction{}, fmt.Errorf("--config: %w", err)
	}
	if a.spec.LogFile != "" {
		if a.spec.LogFile, err = filepath.Abs(a.spec.LogFile); err != nil {
			return serviceAction{}, fmt.Errorf("--log-file: %w", err)
		}
	}
	return a, nil
}

// runService is `apbridge service install|uninstall|start|stop`: the
// relay as a Windows service (internal/winservice).
func runService(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseService(args, stdout, stderr)
	if err != nil {
		return err
	}
	if runtime.GOOS != "windows" {
		return winservice.ErrNotWindows
	}
	switch a.verb {
	case "install":
		if _, err := loadConfigFlag(a.spec.Config, stderr); err != nil {
			return err
		}
		if a.spec.Exe, err = os.Executable(); err != nil {
			return fmt.Errorf("the binary's path: %w", err)
		}
		if err := winservice.Install(a.spec); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s installed (automatic start, restarted on failure): %s %v\nstart it with: apbridge service start --name %s\n",
			a.spec.Name, a.spec.Exe, a.spec.Args(), a.spec.Name)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	switch a.verb {
	case "uninstall":
		err = winservice.Uninstall(wctx, a.spec.Name)
	case "start":
		err = winservice.Start(wctx, a.spec.Name)
	case "stop":
		err = winservice.Stop(wctx, a.spec.Name)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "service %s: %s done\n", a.spec.Name, a.verb)
	return err
}
