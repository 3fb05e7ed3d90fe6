package relay

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestEnvValuesKeepEveryCharacter: a substituted value is data, not YAML:
// '#', quotes, newlines and YAML syntax arrive whole and add no keys. (A
// password takes them all; a name refuses the control characters, and a
// field refuses an empty value that would stand for its default.)
func TestEnvValuesKeepEveryCharacter(t *testing.T) {
	secrets := []string{"abc #def", `a"b'c`, "line1\nline2", "*&!{}[]: -", "x: y\nz: w", "true", "~", "null"}
	for _, s := range secrets {
		cfg := edit("    tags:", "    security: {username: relay, password: '${APB_SECRET}'}  # from the environment\n    tags:")
		c, err := parse([]byte(cfg), lookupIn(map[string]string{"APB_SECRET": s}))
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got := c.Sources[0].Security.Password; got != s {
			t.Errorf("password %q, want %q", got, s)
		}
	}
	// An empty value is "", not null: the field is written, and empty.
	_, err := parse([]byte(edit("instance: site-a", "instance: ${APB_SECRET}")), lookupIn(map[string]string{"APB_SECRET": ""}))
	if err == nil || !strings.Contains(err.Error(), `instance: "" is empty`) {
		t.Errorf("an empty instance from the environment: %v", err)
	}
	// A plain scalar is typed by its value, so numbers can come from the
	// environment too; a quoted one stays a string.
	c, err := parse([]byte(edit("minDwellSeconds: 60", "minDwellSeconds: '${DWELL}'")), lookupIn(map[string]string{"DWELL": "120"}))
	if err != nil || *c.Sources[0].ServiceLevelFailover.MinDwellSeconds != 120 {
		t.Fatalf("number from env: %v", err)
	}
}

func TestEnvErrorsNameTheLine(t *testing.T) {
	tests := []struct{ value, want string }{
		{"${UNCLOSED", "line 2: unclosed ${"},
		{"${}", "line 2: empty ${}"},
		{"${1BAD}", `line 2: ${1BAD}: "1BAD" is not a variable name`},
		{"${NOPE}", "line 2: environment variable NOPE is not set"},
	}
	for _, tt := range tests {
		_, err := parse([]byte(edit("instance: site-a", "instance: '"+tt.value+"'")), lookupIn(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.value, err, tt.want)
		}
	}
	// Positive control: the escape and the default are not errors.
	c, err := parse([]byte(edit("instance: site-a", "instance: '$${X}-${NOPE:-d}'")), lookupIn(nil))
	if err != nil || c.Instance != "${X}-d" {
		t.Fatalf("escape and default: %v %+v", err, c)
	}
}

// TestErrorsNeverShowSubstitutedValues: a bad value from the environment is
// shown as the file spells it.
func TestErrorsNeverShowSubstitutedValues(t *testing.T) {
	env := lookupIn(map[string]string{"LEVEL": "hunter2-secret", "URL": "nats://u:pw-secret@h:abc", "N": "1.5x"})
	cfg := edit("instance: site-a", "instance: site-a\nlogLevel: ${LEVEL}")
	cfg = strings.Replace(cfg, "nats://127.0.0.1:4223", "'${URL}'", 1)
	cfg = strings.Replace(cfg, "minDwellSeconds: 60", "minDwellSeconds: '${N}'", 1)
	_, err := parse([]byte(cfg), env)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, secret := range []string{"hunter2", "pw-secret", "1.5x"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error shows %q:\n%s", secret, msg)
		}
	}
	_, err = parse([]byte(strings.Replace(cfg, "minDwellSeconds: '${N}'", "minDwellSeconds: 60", 1)), env)
	if msg = err.Error(); !strings.Contains(msg, "logLevel: \"${LEVEL}\" is not valid") || !strings.Contains(msg, "nats.servers[1]") {
		t.Errorf("errors do not name the fields:\n%s", msg)
	}
}

func TestEnvLeavesKeysAndCommentsAlone(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("# ${C}\n${K}: '${V:-1}' # ${D}\n"), &n); err != nil {
		t.Fatal(err)
	}
	if _, err := expandEnv(&n, lookupIn(nil)); err != nil {
		t.Fatal(err)
	}
	out, _ := yaml.Marshal(&n)
	if got := string(out); !strings.Contains(got, "# ${C}") || !strings.Contains(got, "${K}: 1") || !strings.Contains(got, "# ${D}") {
		t.Fatalf("got %q", got)
	}
}
