package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/relay"
)

const unitPath = "../../deploy/systemd/apbridge.service"

// unitFile parses a systemd unit: section -> key -> values (a key may be
// given more than once).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// TestSystemdUnit: the unit runs the relay as the notify protocol and its
// timing expect, as a user of its own, hardened; and systemd-analyze
// verify accepts it where the machine has systemd-analyze.
func TestSystemdUnit(t *testing.T) {
	u := unitFile(t, unitPath)
	svc := u["Service"]
	one := func(k string) string {
		t.Helper()
		if len(svc[k]) != 1 {
			t.Errorf("[Service] %s given %d times, want once", k, len(svc[k]))
			return ""
		}
		return svc[k][0]
	}
	dur := func(k string) time.Duration {
		t.Helper()
		d, err := time.ParseDuration(one(k))
		if err != nil {
			t.Errorf("%s: %v", k, err)
		}
		return d
	}
	for k, want := range map[string]string{
		"Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "User": "apbridge", "Group": "apbridge",
		"ExecReload": "/bin/kill -HUP $MAINPID", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "CapabilityBoundingSet": "", "StateDirectory": "apbridge",
	} {
		if got := one(k); got != want {
			t.Errorf("%s=%s, want %s", k, got, want)
		}
	}
	if !strings.HasSuffix(one("ExecStart"), "/apbridge run --config /etc/apbridge/apbridge.yaml") {
		t.Errorf("ExecStart=%s", one("ExecStart"))
	}
	// The watchdog: the main loop pings at most every half of it.
	if wd := dur("WatchdogSec"); wd < 2*passInterval(wd) || wd < 10*time.Second {
		t.Errorf("WatchdogSec=%v: too short for pings every %v", wd, passInterval(wd))
	}
	// The stop waits out the drain of SIGTERM.
	if stop := dur("TimeoutStopSec"); stop < relay.DefaultDrainTimeout+10*time.Second {
		t.Errorf("TimeoutStopSec=%v, less than the drain (%v) and a margin", stop, relay.DefaultDrainTimeout)
	}
	// The start waits out the relay's own NATS connect limit (30 s).
	if start := dur("TimeoutStartSec"); start < 45*time.Second {
		t.Errorf("TimeoutStartSec=%v", start)
	}
	// The Go runtime exits 2 after a panic and after the watchdog's
	// SIGABRT: both must restart.
	for _, v := range svc["RestartPreventExitStatus"] {
		if slices.Contains(strings.Fields(v), "2") {
			t.Errorf("RestartPreventExitStatus=%s keeps a panicked or watchdog-killed relay down", v)
		}
	}
	// The notify socket is a Unix socket; NATS, OPC UA and HTTP are IP.
	fams := strings.Fields(one("RestrictAddressFamilies"))
	for _, f := range []string{"AF_UNIX", "AF_INET", "AF_INET6"} {
		if !slices.Contains(fams, f) {
			t.Errorf("RestrictAddressFamilies lacks %s", f)
		}
	}
	if !slices.Contains(u["Unit"]["After"], "network-online.target") || u["Install"]["WantedBy"][0] != "multi-user.target" {
		t.Errorf("[Unit] After %v, [Install] WantedBy %v", u["Unit"]["After"], u["Install"]["WantedBy"])
	}

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not on this machine: the unit is checked by the keys above only")
		return
	}
	// verify requires ExecStart's binary to exist: point it at this one.
	b, _ := os.ReadFile(unitPath)
	exe, _ := os.Executable()
	path := filepath.Join(t.TempDir(), "apbridge.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/apbridge", exe)), 0o644)
	out, err := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
	// verify exits 0 for unknown keys: any line naming the unit fails.
	if err != nil || strings.Contains(string(out), "apbridge.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	} else if len(out) > 0 {
		t.Logf("systemd-analyze verify said (not about the unit):\n%s", out)
	}
}

// TestDockerfile checks what the image promises without building it
// (make image does, where a container engine runs): a static binary
// stamped as make release stamps, on an empty base with the CA
// certificates, a non-root user, the config at /etc/apbridge, and a
// HEALTHCHECK that asks the relay's default listener with apbridge health.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := strings.ReplaceAll(string(b), "\\\n", " ")
	var froms, users []string
	for _, line := range strings.Split(df, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[0] == "FROM" {
			froms = append(froms, f[1])
		}
		if len(f) > 1 && f[0] == "USER" {
			users = append(users, f[1])
		}
	}
	if len(froms) == 0 || froms[len(froms)-1] != "scratch" {
		t.Errorf("final stage FROM %v, want scratch", froms)
	}
	if len(users) != 1 || strings.HasPrefix(users[0], "0") || strings.HasPrefix(users[0], "root") {
		t.Errorf("USER %v: want one non-root user", users)
	}
	for _, want := range []string{"CGO_ENABLED=0", "/etc/ssl/certs/ca-certificates.crt",
		`CMD ["run", "--config", "/etc/apbridge/apbridge.yaml"]`, `ENTRYPOINT ["/usr/local/bin/apbridge"]`} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	var stamps []string
	for _, m := range regexp.MustCompile(`-X main\.(\w+)=`).FindAllStringSubmatch(df, -1) {
		stamps = append(stamps, m[1])
	}
	slices.Sort(stamps)
	if strings.Join(stamps, " ") != "buildDate commit modified version" {
		t.Errorf("Dockerfile stamps %v", stamps)
	}
	hc := regexp.MustCompile(`HEALTHCHECK .*CMD \["/usr/local/bin/apbridge", "health", "--url", "http://127\.0\.0\.1(:\d+)/healthz"`).FindStringSubmatch(df)
	if hc == nil {
		t.Fatal("no HEALTHCHECK running apbridge health on /healthz")
	}
	if def := (&relay.Config{}).HTTPListen(); hc[1] != def {
		t.Errorf("HEALTHCHECK asks port %s, the relay listens on %s by default", hc[1], def)
	}
	if !strings.Contains(df, "EXPOSE "+strings.TrimPrefix((&relay.Config{}).HTTPListen(), ":")) {
		t.Error("the default listener's port is not exposed")
	}
}
