// Command apbridge-lab runs the relay on the embedded test cluster (three
// NATS brokers, a redundant OPC UA server pair, a fault proxy): the
// scripted maintenance demo and the failover benchmarks. It is not the
// relay a site runs (that is apbridge, which links none of this).
//
//	apbridge-lab demo                        scripted maintenance on the embedded cluster
//	apbridge-lab bench [flags] [SCENARIO...] failover benchmarks on the embedded cluster
//
// Run `apbridge-lab help` for the flags of each command.
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
		{Name: "demo", Summary: "run the scripted maintenance demo on the embedded cluster", Run: runDemo},
		{Name: "bench", Summary: "run failover benchmarks on the embedded cluster", Run: runBench},
		// Hidden: the soak starts it as its relay child process.
		{Name: "soak-relay", Summary: "the relay process the soak measures", Run: runSoakRelay, Hidden: true},
		// Hidden: ua-ingest's processes when the lab's test binary is
		// their binary (the bench's test).
		// Hidden: the edge scenarios' hub cluster, in a process of its own.
		{Name: "edge-hub", Summary: "the hub cluster of the edge scenarios", Run: runEdgeHub, Hidden: true},
		{Name: "edge-site", Summary: "the site cluster of the edge scenarios", Run: runEdgeSite, Hidden: true},
		{Name: "ingest-child", Summary: "the processes ua-ingest measures", Run: relaychild.RunIngest, Hidden: true},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run("apbridge-lab", commands(), args, stdout, stderr)
}
