package winservice

import (
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

type fakeEventLog struct {
	events []string // "info 1 msg"
	closed bool
	err    error
}

func (f *fakeEventLog) add(kind string, id uint32, msg string) error {
	f.events = append(f.events, kind+" "+string(rune('0'+id))+" "+msg)
	return f.err
}
func (f *fakeEventLog) Info(id uint32, msg string) error    { return f.add("info", id, msg) }
func (f *fakeEventLog) Warning(id uint32, msg string) error { return f.add("warning", id, msg) }
func (f *fakeEventLog) Error(id uint32, msg string) error   { return f.add("error", id, msg) }
func (f *fakeEventLog) Close() error                        { f.closed = true; return nil }

// Each log line becomes one event of its level's type and ID, without
// its newline; the logger hands the writer the level.
func TestEventLogWriter(t *testing.T) {
	fl := &fakeEventLog{}
	w := NewEventLogWriter(fl)
	log := zerolog.New(w).Level(zerolog.DebugLevel)
	log.Debug().Msg("d")
	log.Info().Msg("i")
	log.Warn().Msg("w")
	log.Error().Msg("e")
	w.Write([]byte("plain\n"))
	want := []string{
		`info 1 {"level":"debug","message":"d"}`,
		`info 1 {"level":"info","message":"i"}`,
		`warning 2 {"level":"warn","message":"w"}`,
		`error 3 {"level":"error","message":"e"}`,
		`info 1 plain`,
	}
	if strings.Join(fl.events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(fl.events, "\n"), strings.Join(want, "\n"))
	}
	fl.err = errors.New("log full")
	if n, err := w.WriteLevel(zerolog.InfoLevel, []byte("x\n")); n != 0 || err == nil {
		t.Errorf("a failed report: %d, %v", n, err)
	}
	w.Close()
	if !fl.closed {
		t.Error("Close did not close the event log")
	}
}

func TestSpecArgs(t *testing.T) {
	s := Spec{Name: "apbridge-b", Config: `C:\apbridge\b.yaml`}
	if got := strings.Join(s.Args(), " "); got != `run --config C:\apbridge\b.yaml --event-log apbridge-b` {
		t.Errorf("args %q", got)
	}
	s.LogFile, s.Drain = `C:\logs\b.log`, 45e9
	if got := strings.Join(s.Args(), " "); got != `run --config C:\apbridge\b.yaml --log-file C:\logs\b.log --drain-timeout 45s` {
		t.Errorf("args %q", got)
	}
}

func TestCheckName(t *testing.T) {
	for name, want := range map[string]string{
		"apbridge": "", "apbridge-site_2.a": "",
		"":                      `--name: "" is out of range (valid: 1-80 characters`,
		strings.Repeat("a", 81): "is out of range",
		"ap bridge":             `--name: "ap bridge" holds ' ' at byte 2`,
		`NT\x`:                  `holds '\\' at byte 2`,
	} {
		err := CheckName("--name", name)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckName(%q) = %v, want %q", name, err, want)
		}
	}
}
