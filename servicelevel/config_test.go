package servicelevel

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestFailoverConfigDefaults(t *testing.T) {
	want := Settings{
		Enabled:            true,
		DegradedWindow:     10 * time.Second,
		MinDwell:           60 * time.Second,
		RetryCount:         3,
		ReconnectDelay:     5 * time.Second,
		ConnectTimeout:     10 * time.Second,
		FastRetryInterval:  100 * time.Millisecond,
		FastConnectTimeout: 500 * time.Millisecond,
	}
	for _, doc := range []string{
		`{}`,
		`{"serviceLevelFailover": null}`,
		`{"serviceLevelFailover": {}}`,
		`{"serviceLevelFailover": {"enabled": null, "degradedWindowSeconds": null, "minDwellSeconds": null}}`,
	} {
		var c FailoverConfig
		if err := json.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got, err := c.Settings()
		if err != nil || got != want {
			t.Errorf("%s: Settings() = %+v, %v; want the defaults", doc, got, err)
		}
	}
	for _, doc := range []string{"", "serviceLevelFailover:\n", "serviceLevelFailover: ~\n", "serviceLevelFailover: {enabled: null}\n"} {
		var c FailoverConfig
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got, err := c.Settings(); err != nil || got != want {
			t.Errorf("yaml %q: Settings() = %+v, %v; want the defaults", doc, got, err)
		}
	}
}

func TestFailoverConfigExplicitValues(t *testing.T) {
	doc := `
serviceLevelFailover:
  enabled: false
  degradedWindowSeconds: 1
  minDwellSeconds: 0
failoverRetryCount: 5
reconnectDelaySeconds: 2
connectTimeoutSeconds: 30
fastRetryIntervalMilliseconds: 0
fastConnectTimeoutMilliseconds: 250
`
	var c FailoverConfig
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	got, err := c.Settings()
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Enabled:            false,
		DegradedWindow:     time.Second,
		MinDwell:           0,
		RetryCount:         5,
		ReconnectDelay:     2 * time.Second,
		ConnectTimeout:     30 * time.Second,
		FastRetryInterval:  0,
		FastConnectTimeout: 250 * time.Millisecond,
	}
	if got != want {
		t.Errorf("Settings() = %+v, want %+v", got, want)
	}

	// What is written comes back unchanged, and an empty config writes
	// nothing (no hash churn for stored configs).
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back FailoverConfig
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if s, _ := back.Settings(); s != want {
		t.Errorf("JSON round trip = %+v (%s)", s, b)
	}
	if b, _ := json.Marshal(FailoverConfig{}); string(b) != `{}` {
		t.Errorf("empty config marshals to %s", b)
	}
}

func TestFailoverConfigValidation(t *testing.T) {
	tests := []struct {
		doc  string
		want []string // every message, in field order
	}{
		{`{"serviceLevelFailover": {"degradedWindowSeconds": 0}}`,
			[]string{"serviceLevelFailover.degradedWindowSeconds: 0 is out of range (valid 1-3600)"}},
		{`{"serviceLevelFailover": {"degradedWindowSeconds": 3601}}`,
			[]string{"serviceLevelFailover.degradedWindowSeconds: 3601 is out of range (valid 1-3600)"}},
		{`{"serviceLevelFailover": {"degradedWindowSeconds": -5}}`,
			[]string{"serviceLevelFailover.degradedWindowSeconds: -5 is out of range (valid 1-3600)"}},
		{`{"serviceLevelFailover": {"minDwellSeconds": -1}}`,
			[]string{"serviceLevelFailover.minDwellSeconds: -1 is out of range (valid 0-86400)"}},
		{`{"serviceLevelFailover": {"minDwellSeconds": 86401}}`,
			[]string{"serviceLevelFailover.minDwellSeconds: 86401 is out of range (valid 0-86400)"}},
		{`{"failoverRetryCount": 0}`,
			[]string{"failoverRetryCount: 0 is out of range (valid 1-100)"}},
		{`{"failoverRetryCount": 101}`,
			[]string{"failoverRetryCount: 101 is out of range (valid 1-100)"}},
		{`{"reconnectDelaySeconds": 0}`,
			[]string{"reconnectDelaySeconds: 0 is out of range (valid 1-3600)"}},
		{`{"connectTimeoutSeconds": 301}`,
			[]string{"connectTimeoutSeconds: 301 is out of range (valid 1-300)"}},
		{`{"connectTimeoutSeconds": 0}`,
			[]string{"connectTimeoutSeconds: 0 is out of range (valid 1-300)"}},
		{`{"fastRetryIntervalMilliseconds": -1}`,
			[]string{"fastRetryIntervalMilliseconds: -1 is out of range (valid 0-10000)"}},
		{`{"fastRetryIntervalMilliseconds": 10001}`,
			[]string{"fastRetryIntervalMilliseconds: 10001 is out of range (valid 0-10000)"}},
		{`{"fastConnectTimeoutMilliseconds": 49}`,
			[]string{"fastConnectTimeoutMilliseconds: 49 is out of range (valid 50-10000)"}},
		{`{"serviceLevelFailover": {"degradedWindowSeconds": 0, "minDwellSeconds": -1}, "failoverRetryCount": 0, "fastConnectTimeoutMilliseconds": 0}`,
			[]string{
				"serviceLevelFailover.degradedWindowSeconds: 0 is out of range (valid 1-3600)",
				"serviceLevelFailover.minDwellSeconds: -1 is out of range (valid 0-86400)",
				"failoverRetryCount: 0 is out of range (valid 1-100)",
				"fastConnectTimeoutMilliseconds: 0 is out of range (valid 50-10000)",
			}},
	}
	for _, tt := range tests {
		var c FailoverConfig
		if err := json.Unmarshal([]byte(tt.doc), &c); err != nil {
			t.Fatalf("%s: %v", tt.doc, err)
		}
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: Validate() = nil, want %v", tt.doc, tt.want)
			continue
		}
		if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s:\n got  %q\n want %q", tt.doc, got, tt.want)
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.Contains(tt.want[0], fe.Field) {
			t.Errorf("%s: error %v does not expose a *FieldError for the field", tt.doc, err)
		}
		if _, err := NewPolicy(c); err == nil {
			t.Errorf("%s: NewPolicy accepted it", tt.doc)
		}
	}
}

func TestFailoverConfigBoundariesAreValid(t *testing.T) {
	for _, doc := range []string{
		`{"serviceLevelFailover": {"degradedWindowSeconds": 1, "minDwellSeconds": 0}}`,
		`{"serviceLevelFailover": {"degradedWindowSeconds": 3600, "minDwellSeconds": 86400}}`,
		`{"failoverRetryCount": 1, "reconnectDelaySeconds": 1, "connectTimeoutSeconds": 1, "fastRetryIntervalMilliseconds": 0, "fastConnectTimeoutMilliseconds": 50}`,
		`{"failoverRetryCount": 100, "reconnectDelaySeconds": 3600, "connectTimeoutSeconds": 300, "fastRetryIntervalMilliseconds": 10000, "fastConnectTimeoutMilliseconds": 10000}`,
	} {
		var c FailoverConfig
		if err := json.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}
