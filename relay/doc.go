// Package relay assembles a relay from its configuration: the one place
// that builds an ApConnection, a sink (core NATS or JetStream), a bridge
// and its sources from a Config, and stops them again in order. The relay
// binary, its demo and its benchmarks all start relays here.
//
// Config is the relay's configuration file (docs/configuration.md
// describes every field); Load and Parse read it and Validate reports every
// problem at once. Start returns a running Relay; options add what a file
// cannot say, such as a source built in code (WithSource).
package relay
