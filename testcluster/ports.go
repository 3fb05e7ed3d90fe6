package testcluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Listeners that must come back on the same port after a kill (NATS client
// and cluster ports, the OPC UA servers' endpoints) take their port from
// below the kernel's ephemeral range. A port from that range, freed by a
// kill, can be handed to any outgoing connection on the machine as its
// source port and stays taken for as long as that connection lives: CI saw
// a restart fail for 50 s because of it. Ports below the range are only
// ever taken by explicit binds.
const stablePortFloor = 10000

// stablePortRange returns the half-open range [lo, hi) that stable ports
// are drawn from, or ok false when the ephemeral range leaves no room below
// it (then port 0 is the best there is).
func stablePortRange() (lo, hi int, ok bool) {
	hi = 49152 // IANA's dynamic range: the default on macOS and Windows
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	if hi-stablePortFloor < 1000 {
		return 0, 0, false
	}
	return stablePortFloor, hi, true
}

// listenStable listens on a free loopback port outside the ephemeral range.
func listenStable() (net.Listener, error) {
	lo, hi, ok := stablePortRange()
	if !ok {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	var lastErr error
	for range 100 {
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("testcluster: no free port in %d-%d: %w", lo, hi-1, lastErr)
}

// stablePort returns a free loopback port outside the ephemeral range, for
// a server that binds it itself.
func stablePort() (int, error) {
	l, err := listenStable()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portsFree reports the first of ports that cannot be bound on loopback
// right now, with the reason.
func portsFree(ports ...int) error {
	var errs []error
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.Close()
	}
	return errors.Join(errs...)
}
