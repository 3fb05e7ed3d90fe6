// Package layout holds no code: its test checks that imports point one
// way, as docs/architecture.md draws them, and that the relay binary links
// no test server.
package layout
