package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/winservice"
)

func TestParseService(t *testing.T) {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tc := range []struct {
		args []string
		want serviceAction
		err  string
	}{
		{args: []string{"install", "--config", "site.yaml"},
			want: serviceAction{verb: "install", spec: winservice.Spec{Name: "apbridge", Config: abs("site.yaml")}}},
		{args: []string{"install", "--config", "site.yaml", "--name", "apbridge-b", "--log-file", "b.log", "--drain-timeout", "45s", "--account", `NT SERVICE\apbridge-b`},
			want: serviceAction{verb: "install", spec: winservice.Spec{Name: "apbridge-b", Config: abs("site.yaml"), LogFile: abs("b.log"), Drain: 45 * time.Second, Account: `NT SERVICE\apbridge-b`}}},
		{args: []string{"start"}, want: serviceAction{verb: "start", spec: winservice.Spec{Name: "apbridge"}, wait: 2 * time.Minute}},
		{args: []string{"stop", "--name", "b", "--timeout", "90s"}, want: serviceAction{verb: "stop", spec: winservice.Spec{Name: "b"}, wait: 90 * time.Second}},
		{args: []string{"uninstall"}, want: serviceAction{verb: "uninstall", spec: winservice.Spec{Name: "apbridge"}, wait: 2 * time.Minute}},
		{args: nil, err: "service: give one of install, uninstall, start, stop"},
		{args: []string{"restart"}, err: `service: unknown subcommand "restart" (valid: install, uninstall, start, stop)`},
		{args: []string{"install"}, err: "--config is required"},
		{args: []string{"install", "--config", "x", "--drain-timeout", "0s"}, err: "--drain-timeout: 0s is out of range"},
		{args: []string{"install", "--config", "x", "--name", "a b"}, err: `--name: "a b" holds ' ' at byte 1`},
		{args: []string{"start", "--config", "x"}, err: "flag provided but not defined: -config"},
		{args: []string{"stop", "--timeout", "-1s"}, err: "--timeout: -1s is out of range"},
		{args: []string{"stop", "extra"}, err: `unexpected argument "extra"`},
	} {
		var stderr bytes.Buffer
		got, err := parseService(tc.args, io.Discard, &stderr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.err) {
				t.Errorf("%q: %v (stderr %q), want %q", tc.args, err, stderr.String(), tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v\nwant %+v", tc.args, got, err, tc.want)
		}
	}
}

// Off Windows `apbridge service` says where it belongs, after the command
// line is checked (exit 2 for a bad one, 1 for the platform).
func TestServiceOffWindows(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows has services")
	}
	var stderr bytes.Buffer
	if code := run([]string{"service", "start"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "this is not Windows") {
		t.Errorf("exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"service", "bogus"}, io.Discard, &stderr); code != 2 {
		t.Errorf("bad verb: exit %d, %q", code, stderr.String())
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func TestOpenLogSink(t *testing.T) {
	var opened []string
	open := func(src string) (io.WriteCloser, error) {
		opened = append(opened, src)
		if src == "broken" {
			return nil, errors.New("no such source")
		}
		return nopCloser{io.Discard}, nil
	}
	stderr := &bytes.Buffer{}
	file := filepath.Join(t.TempDir(), "relay.log")
	for _, tc := range []struct {
		file, event string
		service     bool
		want, err   string
	}{
		{want: "stderr"},
		{service: true, want: "event log apbridge"}, // a service's stderr goes nowhere
		{file: file, want: "file " + file},
		{file: file, service: true, want: "file " + file},
		{event: "apbridge-b", want: "event log apbridge-b"},
		{file: file, event: "x", err: "--log-file and --event-log: give one of them"},
		{event: "a/b", err: `--event-log: "a/b" holds '/'`},
		{event: "broken", err: "--event-log: no such source"},
		{file: filepath.Join(t.TempDir(), "missing", "x.log"), err: "--log-file: open "},
	} {
		s, err := openLogSink(tc.file, tc.event, tc.service, stderr, open)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want %q", tc, err, tc.err)
			}
			continue
		}
		if err != nil || s.name != tc.want || s.separate() != (tc.want != "stderr") {
			t.Errorf("%+v: sink %q, %v; want %q", tc, s.name, err, tc.want)
		}
		s.Close()
	}
	if strings.Join(opened, ",") != "apbridge,apbridge-b,broken" {
		t.Errorf("event logs opened: %q", opened)
	}
}

// A log file is appended to, and a config the relay refuses is logged
// there too (under a service manager stderr may go nowhere).
func TestRunLogFile(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "relay.log")
	os.WriteFile(logPath, []byte("earlier line\n"), 0o600)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("nats: {servers: []}\n"), 0o600)
	var stderr bytes.Buffer
	if code := run([]string{"run", "--config", bad, "--log-file", logPath}, io.Discard, &stderr); code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(b), "earlier line\n") || !strings.Contains(string(b), `"message":"config refused"`) || !strings.Contains(string(b), "nats.servers") {
		t.Errorf("log file:\n%s", b)
	}
	if !strings.Contains(stderr.String(), "nats.servers") {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestHealthCommand(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"ready":false,"reasons":["source a: down"]}`))
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"health", "--url", srv.URL + "/healthz"}, 0, "ok", ""},
		{[]string{"health", "--url", srv.URL + "/readyz"}, 1, "", "503 Service Unavailable: {\"ready\":false"},
		{[]string{"health", "--url", "ftp://x/healthz"}, 2, "", "not an http(s) URL"},
		{[]string{"health", "--url", srv.URL, "--timeout", "0s"}, 2, "", "--timeout: 0s is out of range"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, code, stdout.String(), stderr.String())
		}
	}
	// Nothing listening: exit 1 with the reason.
	srv.Close()
	var stderr bytes.Buffer
	if code := run([]string{"health", "--url", srv.URL + "/healthz"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("no listener: exit %d, %q", code, stderr.String())
	}
}
