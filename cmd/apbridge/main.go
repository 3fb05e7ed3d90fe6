// Command apbridge is the relay: it relays OPC UA tags to NATS through
// broker maintenance and server failover. It links no test server; the
// demo and the benchmarks are in apbridge-lab.
//
//	apbridge run --config FILE         relay the configured tags
//	apbridge validate --config FILE    check a config without connecting
//	apbridge fleet status --config FILE  which relay of a fleet owns which source, the config version each runs
//	apbridge fleet apply --config FILE   make the file the config version every relay of the fleet runs
//	apbridge edge status --config FILE   an edge site's stream, the hub's sourcing, the outage it absorbs
//	apbridge health [--url URL]        ask a relay's /healthz (a container's HEALTHCHECK)
//	apbridge service install|uninstall|start|stop   the relay as a Windows service
//	apbridge version                   print the version and build
//
// Run `apbridge help <command>` for the flags of a command. Usage errors
// exit with status 2, a bad config with 1.
package main

import (
	"io"
	"os"

	"github.com/apbridge/apbridge/internal/cli"
	"github.com/apbridge/apbridge/internal/relaychild"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func commands() []cli.Command {
	return []cli.Command{
		{Name: "run", Summary: "relay the configured OPC UA tags to NATS (--config FILE)", Run: runRun},
		{Name: "validate", Summary: "check a config file without connecting (--config FILE)", Run: runValidate},
		{Name: "fleet", Summary: "fleet status: which relay owns which source (--config FILE [--json]); fleet apply: the config version every relay runs (--config FILE [--wait D])", Run: runFleet},
		{Name: "edge", Summary: "edge site status: the site stream, the hub's sourcing, the outage it absorbs (--config FILE [--json])", Run: runEdge},
		{Name: "health", Summary: "ask a relay's health endpoint; exit 0 when it answers 2xx (--url URL)", Run: runHealth},
		{Name: "service", Summary: "Windows: install, uninstall, start or stop the relay as a service", Run: runService},
		{Name: "version", Summary: "print the version and build (also --version)", Run: runVersion},
		// The process the lab's relay-throughput benchmark measures: this
		// binary, so that its memory is the relay's, not the lab's.
		{Name: "relay-child", Summary: "the relay process of the relay-throughput benchmark", Run: relaychild.Run, Hidden: true},
		// The two processes the lab's ua-ingest benchmark measures side by
		// side: the relay and a plain gopcua client.
		{Name: "ingest-child", Summary: "the relay or plain OPC UA client process of the ua-ingest benchmark", Run: relaychild.RunIngest, Hidden: true},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run("apbridge", commands(), args, stdout, stderr)
}
