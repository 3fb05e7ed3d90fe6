package relay

import (
	"fmt"
	"strings"
	"testing"
)

// bigConfig is a config of n tags of one OPC UA source, as the
// config-change bench writes it: a change of the tag list re-reads a
// file like it whole.
func bigConfig(n int, skip int) []byte {
	var b strings.Builder
	b.WriteString("http: {listen: \"\"}\nnats: {servers: [nats://127.0.0.1:4222]}\nsources:\n  - name: line1\n")
	b.WriteString("    endpoints: [opc.tcp://127.0.0.1:4840, opc.tcp://127.0.0.1:4841]\n    mode: warm\n")
	b.WriteString("    publishingIntervalMilliseconds: 100\n    samplingIntervalMilliseconds: 100\n    tags:\n")
	for i := skip; i < n+skip; i++ {
		fmt.Fprintf(&b, "      - {name: Counter%d, address: \"ns=2;s=Counter%d\"}\n", i, i)
	}
	return []byte(b.String())
}

// BenchmarkParse is Parse (decode, check and validate) of a config of
// 10,000 tags, the cost of every SIGHUP and config-service apply.
func BenchmarkParse(b *testing.B) {
	data := bigConfig(10000, 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidate is Validate alone of that config.
func BenchmarkValidate(b *testing.B) {
	c, err := Parse(bigConfig(10000, 0))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiff is Diff of two 10,000-tag configs a tenth apart.
func BenchmarkDiff(b *testing.B) {
	cur, err := Parse(bigConfig(10000, 0))
	if err != nil {
		b.Fatal(err)
	}
	next, err := Parse(bigConfig(10000, 1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if p := Diff(cur, next); len(p.Tags) != 1 {
			b.Fatalf("plan %s", p.Summary())
		}
	}
}
