package relay

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/apbridge/apbridge/bridge/opcuasource"
	"github.com/apbridge/apbridge/internal/tlsconf"
)

// The checks below are part of Validate (validate calls them): they see
// across fields, where the field checks see one value each.

// checkNATS checks the server URLs (they parse, have a host, a port in
// 1-65535, and no server is named twice) and the files the connection
// reads.
func (c *Config) checkNATS(add func(string, ...any)) {
	if len(c.NATS.Servers) == 0 {
		add("nats.servers: at least one server URL is required")
	}
	seen := map[string]int{}
	for i, s := range c.NATS.Servers {
		key, err := checkNATSURL(s)
		if err != nil {
			add("nats.servers[%d]: %v", i, err)
			continue
		}
		if j, dup := seen[key]; dup {
			add("nats.servers[%d]: %s is the server of nats.servers[%d] too (name each server once)", i, key, j)
			continue
		}
		seen[key] = i
	}
	if c.NATS.Credentials != "" {
		checkFile("nats.credentials", c.NATS.Credentials, add)
	}
	t := c.NATS.TLS
	if t == nil {
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		add("nats.tls: cert and key go together (a client certificate needs its private key)")
	}
	ok := true
	for _, f := range []struct{ name, path string }{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}} {
		if f.path != "" && !checkFile("nats.tls."+f.name, f.path, add) {
			ok = false
		}
	}
	if ok && (t.Cert == "") == (t.Key == "") {
		// The files are there: check that they load, and the key is the
		// certificate's.
		if _, err := tlsconf.Client("nats.tls", t.CA, t.Cert, t.Key, ""); err != nil {
			add("%v", err)
		}
	}
}

// checkFile reports a file that a field names and that is missing or not
// a regular file.
func checkFile(field, path string, add func(string, ...any)) bool {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		add("%s: %v", field, err)
		return false
	case !st.Mode().IsRegular():
		add("%s: %s is not a regular file", field, path)
		return false
	}
	return true
}

// checkNATSURL checks one nats.servers entry and returns its server as
// host:port, the identity that two entries must not share. Errors never
// show a password the URL holds.
func checkNATSURL(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("empty URL (want nats://host:port)")
	}
	u := s
	if !strings.Contains(u, "://") {
		u = "nats://" + u
	}
	pu, err := url.Parse(u)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return "", fmt.Errorf("not a URL (%v); want nats://host:port", err)
	}
	shown := strconv.Quote(pu.Redacted())
	scheme := strings.ToLower(pu.Scheme)
	switch scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return "", fmt.Errorf("%s: scheme %q is not valid (valid: nats, tls, ws, wss)", shown, pu.Scheme)
	}
	host := pu.Hostname()
	if host == "" {
		return "", fmt.Errorf("%s: no host", shown)
	}
	port := pu.Port()
	if port == "" {
		port = map[string]string{"nats": "4222", "tls": "4222", "ws": "80", "wss": "443"}[scheme]
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%s: port %s is out of range (valid 1-65535)", shown, port)
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// checkListen checks http.listen: host:port with a numeric port; 0 asks
// for any free port.
func (c *Config) checkListen(add func(string, ...any)) {
	if c.HTTP.Listen == nil || *c.HTTP.Listen == "" {
		return
	}
	l := *c.HTTP.Listen
	_, port, err := net.SplitHostPort(l)
	if err != nil {
		add("http.listen: %q is not host:port (%v)", l, err)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		add("http.listen: port %q is out of range (valid 1-65535, or 0 for any free port)", port)
	}
}

// checkSecurityFiles checks the files of an OPC UA source's security: the
// client certificate and key are created at the first run only when both
// are absent, so one without the other is refused here rather than at
// the start; a user certificate and key must both be there.
func checkSecurityFiles(f string, sec opcuasource.Security, add func(string, ...any)) {
	exists := func(path string) bool {
		st, err := os.Stat(path)
		return err == nil && st.Mode().IsRegular()
	}
	if sec.CertFile != "" && sec.KeyFile != "" {
		switch c, k := exists(sec.CertFile), exists(sec.KeyFile); {
		case c && !k:
			add("%s.security.keyFile: %s is missing but certFile %s exists: the relay creates both or neither (restore the key, or remove both to have a new pair made)", f, sec.KeyFile, sec.CertFile)
		case k && !c:
			add("%s.security.certFile: %s is missing but keyFile %s exists: the relay creates both or neither (restore the certificate, or remove both to have a new pair made)", f, sec.CertFile, sec.KeyFile)
		}
	}
	for _, file := range []struct{ name, path string }{{"userCertFile", sec.UserCertFile}, {"userKeyFile", sec.UserKeyFile}} {
		if file.path != "" {
			checkFile(f+".security."+file.name, file.path, add)
		}
	}
}

// Warnings returns what a valid config may get wrong without being
// invalid, one line each: today the item queues too small to hold a
// takeover (sizingWarnings). apbridge validate prints them and exits 0;
// run logs them at start.
func (c *Config) Warnings() []string { return sizingWarnings(c) }
