package wire

import "testing"

func TestReserved(t *testing.T) {
	tests := []struct {
		s, want string // want "" means not reserved
	}{
		{"$JS.API.STREAM.DELETE.PLANT", "$JS.API.>"},
		{"$JS.API.>", "$JS.API.>"},
		{"$JS.ACK.PLANT.c.1.1.1.1.0", "$JS.>"},
		{"$JS.EVENT.ADVISORY.API", "$JS.>"},
		{"$JSC.CI.x", "$JSC.>"},
		{"$NRG.AE.x", "$NRG.>"},
		{"$SYS.REQ.SERVER.PING", "$SYS.>"},
		{"$KV.apbridge_fleet.lease.line1", "$KV.>"},
		{"$O.store.x", "$O.>"},
		{"$MQTT.sess.x", "$MQTT.>"},
		{"_INBOX.abc.1", "_INBOX.>"},
		{"$SRV.PING.apbridge", "$SRV.>"},
		{"$FOO.bar", "$FOO.>"},
		{"$G", "$G.>"},
		// Patterns: whatever they could match.
		{">", "$JS.API.>"},
		{"*.API.>", "$JS.API.>"},
		{"*.line1.>", "$JS.>"},
		{"*", "$*.>"},
		{"_INBOX.*", "_INBOX.>"},
		// Not reserved: a '$' or "_INBOX" that is not the first token,
		// or not the whole of it.
		{"apbridge.line1.Temp", ""},
		{"plant.$JS.API.x", ""},
		{"JS.API.x", ""},
		{"_INBOXES.x", ""},
		{"INBOX.x", ""},
		{"a$.b", ""},
		{"plant.>", ""},
	}
	for _, tt := range tests {
		got, ok := Reserved(tt.s)
		if ok != (tt.want != "") || got.Pattern != tt.want {
			t.Errorf("Reserved(%q) = %q, %v; want %q", tt.s, got.Pattern, ok, tt.want)
		}
		if ok && got.Use == "" {
			t.Errorf("Reserved(%q): no use given", tt.s)
		}
	}
}

// TestMapperReserved: CanBeReserved says whether some tag of a source can
// get a reserved subject (a browsed tag's name is not known in advance);
// Reserved whether every tag does.
func TestMapperReserved(t *testing.T) {
	tests := []struct {
		tmpl, source string
		can, every   string // "" means no
	}{
		{DefaultSubject, "line1", "", ""},
		{"plant.{source}.{tag}", "line1", "", ""},
		{"{tag}", "line1", "$JS.API.>", ""},
		{"{tag}.x", "line1", "$JS.API.>", ""},
		{"{tagid}", "line1", "$*.>", ""},
		{"{address}.v", "line1", "$JS.>", ""},
		{"{source}.{tag}", "line1", "", ""},
		{"{source}.{tag}", "$SYS", "$SYS.>", ""},
		{"{source}.{tag}", "_INBOX", "_INBOX.>", ""},
		{"_INBOX.{source}.{tag}", "line1", "_INBOX.>", "_INBOX.>"},
		{"$JS.API.{tag}", "line1", "$JS.API.>", "$JS.API.>"},
		{"$JS.{source}.{tag}", "line1", "$JS.>", "$JS.>"},
		{"$KV.plant.{tag}", "line1", "$KV.>", "$KV.>"},
		{"$plant.{tag}", "line1", "$plant.>", "$plant.>"},
		{"$plant{source}.{tag}", "line1", "$plantline1.>", "$plant*.>"},
		{"x{tagid}.y", "line1", "", ""},
		{"plant.$JS.{tag}", "line1", "", ""},
	}
	for _, tt := range tests {
		m, err := NewMapper(tt.tmpl)
		if err != nil {
			t.Fatalf("NewMapper(%q): %v", tt.tmpl, err)
		}
		got, ok := m.CanBeReserved(tt.source)
		if ok != (tt.can != "") || got.Pattern != tt.can {
			t.Errorf("%q.CanBeReserved(%q) = %q, %v; want %q", tt.tmpl, tt.source, got.Pattern, ok, tt.can)
		}
		got, ok = m.Reserved()
		if ok != (tt.every != "") || got.Pattern != tt.every {
			t.Errorf("%q.Reserved() = %q, %v; want %q", tt.tmpl, got.Pattern, ok, tt.every)
		}
	}
}

// TestReservedAgreesWithSubjects: a template that CanBeReserved says no
// to gives no reserved subject for tag names that try hard; one that
// Reserved says yes to gives only reserved ones.
func TestReservedAgreesWithSubjects(t *testing.T) {
	names := []string{"$JS.API.STREAM.DELETE.X", "_INBOX.x", "$SYS", "$", "a.$KV.b", "Line1.Temp", "$.x"}
	for _, tmpl := range []string{DefaultSubject, "plant.{tagid}", "x{tag}", "{source}.{tag}", "$KV.p.{tag}", "{tag}", "{tagid}.v"} {
		m, err := NewMapper(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		_, can := m.CanBeReserved("line1")
		_, every := m.Reserved()
		for _, n := range names {
			s, err := m.Subject("line1", n, "ns=1;s="+n)
			if err != nil {
				continue
			}
			_, r := Reserved(s)
			if r && !can {
				t.Errorf("%q gives %q the reserved subject %q, but CanBeReserved says no", tmpl, n, s)
			}
			if every && !r {
				t.Errorf("%q gives %q the subject %q outside every reserved space, but Reserved says every subject is in one", tmpl, n, s)
			}
		}
	}
}
