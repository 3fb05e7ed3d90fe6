// Package nodeopcua runs the independent OPC UA server of
// interop/node-opcua (node-opcua from npm, a server apbridge did not write)
// for the interop tests and benchmarks. `make interop-deps` installs it;
// tests skip loudly where Node.js or the install is missing, and fail
// instead when CI is set.
package nodeopcua

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/tailbuf"
	"github.com/gopcua/opcua"
	"github.com/gopcua/opcua/ua"
)

// Config is the server's configuration; zero fields take the script's
// defaults (ServiceLevel 255, policy and mode None, anonymous login, a
// counter ticking every 100 ms).
type Config struct {
	Port         int               `json:"port,omitempty"`
	ServiceLevel int               `json:"serviceLevel,omitempty"`
	Policies     []string          `json:"policies,omitempty"`
	Modes        []string          `json:"modes,omitempty"`
	Users        map[string]string `json:"users,omitempty"`
	NoAnonymous  bool              `json:"-"`
	CounterMs    int               `json:"counterMs,omitempty"`
	// Tags adds Int32 variables s=T0, s=T1, ... for plant-scale runs:
	// every fourth counts up every TagMs (default 1000), the others hold
	// their index.
	Tags  int `json:"tags,omitempty"`
	TagMs int `json:"tagMs,omitempty"`
	// CountEvery makes every CountEvery-th tag count instead of every
	// fourth (1: all of them, for a load of N tags changing at one rate).
	CountEvery int `json:"countEvery,omitempty"`
	// PKI is the server's certificate store (created when missing).
	PKI string `json:"pki,omitempty"`
	// Namespaces are registered in order; the tags are in the last.
	Namespaces []string `json:"namespaces,omitempty"`
	// RejectClients refuses client certificates it does not already
	// trust (by default every client certificate is accepted).
	RejectClients bool `json:"-"`
	// ApplicationURI is the server's ApplicationUri, in ServerArray[0]
	// and its endpoint description. Default urn:apbridge:interop:<port>:
	// every server its own, as servers on different hosts have
	// (node-opcua's own default is one URI for every server of a host,
	// which makes two of them look like one server).
	ApplicationURI string `json:"applicationUri,omitempty"`
	// RedundancySupport is what the server reports at i=3709, by its
	// Part 5 name (None, Cold, Warm, Hot, Transparent, HotAndMirrored);
	// default None, node-opcua's.
	RedundancySupport string `json:"redundancySupport,omitempty"`
	// ServerURIs is the server's ServerUriArray (i=11314), the
	// ApplicationUris of its redundant set; default empty.
	ServerURIs []string `json:"serverUris,omitempty"`
	// Partners are servers its FindServers answers with besides itself,
	// as a server of a redundant set that knows its partner may: a client
	// given this server finds them (partner discovery). node-opcua's own
	// answers with itself alone.
	Partners []Partner `json:"partners,omitempty"`
}

// Partner is another server, as FindServers describes it.
type Partner struct {
	ApplicationURI string   `json:"applicationUri"`
	DiscoveryURLs  []string `json:"discoveryUrls"`
}

// Server is a running node-opcua server.
type Server struct {
	// Endpoint is its opc.tcp URL; CertFile its certificate (PEM);
	// ApplicationURI its ApplicationUri.
	Endpoint       string
	CertFile       string
	ApplicationURI string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{}
	stderr *tailbuf.Buffer

	closeOnce sync.Once
}

// scriptDir returns the directory of the server script.
func scriptDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "interop", "node-opcua")
}

// available reports why the server cannot run here, or nil.
func available() error {
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node (Node.js) is not on PATH")
	}
	if _, err := os.Stat(filepath.Join(scriptDir(), "node_modules", "node-opcua")); err != nil {
		return fmt.Errorf("node-opcua is not installed in %s: run make interop-deps", scriptDir())
	}
	return nil
}

// Require skips t, loudly, when the server cannot run here; with CI set it
// fails t instead, so that CI never passes by skipping.
func Require(t testing.TB) {
	t.Helper()
	if err := available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("interop test needs node-opcua and CI is set: %v", err)
		}
		t.Skipf("SKIPPED (interop with node-opcua): %v", err)
	}
}

// freePort returns a port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts a server and returns once it listens (node-opcua takes a
// few seconds) or ctx ends.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := available(); err != nil {
		return nil, err
	}
	if cfg.Port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		cfg.Port = p
	}
	if cfg.ApplicationURI == "" {
		cfg.ApplicationURI = fmt.Sprintf("urn:apbridge:interop:%d", cfg.Port)
	}
	args := struct {
		Config
		Anonymous    bool `json:"anonymous"`
		TrustClients bool `json:"trustClients"`
	}{cfg, !cfg.NoAnonymous, !cfg.RejectClients}
	js, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", filepath.Join(scriptDir(), "server.js"), string(js))
	cmd.Dir = scriptDir()
	s := &Server{cmd: cmd, lines: make(chan string, 16), done: make(chan struct{}), stderr: tailbuf.New(8 << 10),
		ApplicationURI: cfg.ApplicationURI}
	cmd.Stderr = s.stderr
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			default: // nobody waits for it
			}
		}
		cmd.Wait()
	}()
	line, err := s.waitLine(ctx, "READY ")
	if err != nil {
		s.Kill()
		return nil, fmt.Errorf("node-opcua server did not start: %w; its stderr: %s", err, s.stderr.String())
	}
	f := strings.Fields(line)
	if len(f) < 3 {
		s.Kill()
		return nil, fmt.Errorf("node-opcua server: unexpected line %q", line)
	}
	s.Endpoint, s.CertFile = f[1], f[2]
	return s, nil
}

func (s *Server) waitLine(ctx context.Context, prefix string) (string, error) {
	for {
		select {
		case l := <-s.lines:
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-s.done:
			return "", errors.New("the process exited")
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// SetLevel sets the server's ServiceLevel and waits until it has.
func (s *Server) SetLevel(ctx context.Context, level int) error {
	if _, err := fmt.Fprintf(s.stdin, "level %d\n", level); err != nil {
		return err
	}
	_, err := s.waitLine(ctx, fmt.Sprintf("OK level %d", level))
	return err
}

// Stop shuts the server down as a graceful stop does: ServiceLevel 0 (its
// data Bad_OutOfService) at once, then after delay the sessions closed and
// the process gone.
func (s *Server) Stop(ctx context.Context, delay time.Duration) error {
	if _, err := fmt.Fprintf(s.stdin, "stop %d\n", delay.Milliseconds()); err != nil {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.Kill()
		return ctx.Err()
	}
}

// Kill ends the process at once, as a crash does, and waits for it.
func (s *Server) Kill() {
	s.closeOnce.Do(func() {
		s.cmd.Process.Kill()
		s.stdin.Close()
	})
	<-s.done
}

// Close is Kill: idempotent, for a test's cleanup.
func (s *Server) Close() { s.Kill() }

// Stderr returns the last of what the server wrote to stderr.
func (s *Server) Stderr() string { return s.stderr.String() }

// StartT starts a server for t and closes it when t ends.
func StartT(t testing.TB, cfg Config) *Server {
	t.Helper()
	Require(t)
	if cfg.PKI == "" {
		cfg.PKI = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// NamespaceIndex returns the index the server gives the namespace uri.
func (s *Server) NamespaceIndex(ctx context.Context, uri string) (int, error) {
	c, err := opcua.NewClient(s.Endpoint, opcua.SecurityMode(ua.MessageSecurityModeNone), opcua.AutoReconnect(false))
	if err != nil {
		return 0, err
	}
	if err := c.Connect(ctx); err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	ns, err := c.NamespaceArray(ctx)
	if err != nil {
		return 0, err
	}
	for i, u := range ns {
		if u == uri {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%s has no namespace %s: %v", s.Endpoint, uri, ns)
}
