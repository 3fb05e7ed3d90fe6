package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Each takeover at a relay kill, as the new owner tells it in its log: a
// hole in the stream is traced to the instance that took the source over,
// by the lease token its updates carry. A relay's instance of a source
// logs, in this order: the handoff it read (fleet: taking over the
// previous owner's subscription; from, the record's writer) or why it
// ignored one, its start under the lease (fleet: source owned, started;
// token), the takeover's outcome (the EventTakeover, transferred or not
// and why), and, once the server's held messages are given back, how many
// data changes were republished. A gateway source's instance logs the
// handoff it read (fleet: resuming the previous owner's gateway session),
// its start, then whether the predecessor's session was resumed or why
// not.

// Outcomes of a takeover.
const (
	soakTransferred = "transferred"
	soakFallback    = "fallback"
	// soakNoHandoff: the new owner read no handoff, and started anew.
	soakNoHandoff = "no handoff"
	// soakUnknown: the new owner's log has no instance under the token.
	soakUnknown = "unknown"
)

// soakTakeoverOutcome is how one instance took its source over, and what
// the kill cost the source in the stream.
type soakTakeoverOutcome struct {
	Outcome string `json:"outcome"`
	// Reason is why it fell back, or why a handoff was ignored.
	Reason string `json:"reason,omitempty"`
	// HandoffFrom is the relay whose handoff it read.
	HandoffFrom string `json:"handoff_from,omitempty"`
	// Held are the messages the server held for the predecessor;
	// Republished the data changes it gave back.
	Held        int    `json:"held_messages"`
	Republished int    `json:"republished"`
	Lost        uint64 `json:"lost"`
	Unserved    uint64 `json:"unserved"`
}

// soakInstance is a source's instance under a lease token.
type soakInstance struct {
	source string
	token  uint64
}

var soakHeldRE = regexp.MustCompile(`\((\d+) messages held by the server`)

// soakLogLine is what the takeover's lines carry.
type soakLogLine struct {
	Source      string `json:"source"`
	Message     string `json:"message"`
	Event       string `json:"event"`
	Error       string `json:"error"`
	From        string `json:"from"`
	Token       uint64 `json:"token"`
	Republished *int   `json:"republished"`
	Reason      string `json:"reason"`
}

// soakInstances reads a relay's log: each instance's takeover. A line
// that is not a log line is passed over.
func soakInstances(r io.Reader) (map[soakInstance]soakTakeoverOutcome, error) {
	out := map[soakInstance]soakTakeoverOutcome{}
	pending := map[string]soakTakeoverOutcome{} // read before the start
	cur := map[string]soakInstance{}            // the source's last instance
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		var l soakLogLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Source == "" {
			continue
		}
		switch {
		case l.Message == "fleet: taking over the previous owner's subscription",
			l.Message == "fleet: resuming the previous owner's gateway session":
			pending[l.Source] = soakTakeoverOutcome{HandoffFrom: l.From}
		case strings.HasPrefix(l.Message, "fleet: the previous owner had just switched"):
			// A record of a switch: the Pair reports the fallback as it
			// starts, before its start line.
			pending[l.Source] = soakTakeoverOutcome{Outcome: soakFallback, HandoffFrom: l.From,
				Reason: "the previous owner had just switched servers"}
		case strings.HasPrefix(l.Message, "fleet: handoff ignored"):
			pending[l.Source] = soakTakeoverOutcome{Outcome: soakNoHandoff, Reason: strings.TrimPrefix(l.Message, "fleet: ") + ": " + l.Error}
		case l.Message == "fleet: source owned, started":
			o, ok := pending[l.Source]
			delete(pending, l.Source)
			if !ok || o.Outcome == "" {
				// No handoff read; one read is told by the takeover's
				// event, or its absence (a handoff that did not fit).
				o.Outcome = soakNoHandoff
				if ok {
					o.Outcome = soakFallback
					o.Reason = "no takeover event"
				}
			}
			in := soakInstance{l.Source, l.Token}
			out[in], cur[l.Source] = o, in
		case strings.HasPrefix(l.Message, "the predecessor's handoff does not fit this source"):
			// Logged as the instance starts, before its start line.
			if o, ok := pending[l.Source]; ok {
				o.Outcome, o.Reason = soakFallback, "handoff does not fit: "+l.Error
				pending[l.Source] = o
			}
		case l.Event == "successor takeover",
			l.Message == "predecessor's gateway session resumed",
			strings.HasPrefix(l.Message, "predecessor's gateway session not resumed"):
			// The outcome: an OPC UA source's takeover event (why it
			// fell back in its error), a gateway source's resume or not
			// (why in its reason). One told before the instance's start
			// line is the fallback of a switch's record, told already.
			in, ok := cur[l.Source]
			if p, early := pending[l.Source]; !ok || early && p.Outcome != "" {
				continue
			}
			o := out[in]
			o.Outcome, o.Reason = soakTransferred, ""
			if why := l.Error + l.Reason; why != "" {
				o.Outcome, o.Reason = soakFallback, why
			}
			if m := soakHeldRE.FindStringSubmatch(l.Message); m != nil {
				o.Held, _ = strconv.Atoi(m[1])
			}
			out[in] = o
		case l.Republished != nil && strings.HasPrefix(l.Message, "the successor caught up"):
			if in, ok := cur[l.Source]; ok {
				o := out[in]
				o.Republished = *l.Republished
				out[in] = o
			}
		}
	}
	return out, sc.Err()
}

// setTakeoverOutcomes sets each takeover's outcome from its new owner's
// log (relays'), and its cost from the audit; a log that cannot be read
// is said on progress.
func setTakeoverOutcomes(relays []*soakRelay, progress io.Writer, tos []soakTakeover, a soakIdentity) {
	logs := map[string]map[soakInstance]soakTakeoverOutcome{}
	for _, rel := range relays {
		f, err := os.Open(rel.logPath)
		if err != nil {
			continue
		}
		in, err := soakInstances(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(progress, "  relay %s's log: %v\n", rel.id, err)
		}
		logs[rel.id] = in
	}
	for i := range tos {
		t := &tos[i]
		o, ok := logs[t.After][soakInstance{t.Source, t.Token}]
		if !ok {
			o.Outcome = soakUnknown
		}
		if c := a.ByKill[soakKillSource{t.kill, t.Source}]; c != nil {
			o.Lost, o.Unserved = c.lost, c.unserved
		}
		t.soakTakeoverOutcome = o
	}
}

// describe is the takeover's outcome in a report line.
func (o soakTakeoverOutcome) describe() string {
	var b strings.Builder
	b.WriteString(o.Outcome)
	switch o.Outcome {
	case soakTransferred:
		fmt.Fprintf(&b, " (handoff of %s, %d messages held, %d republished)", o.HandoffFrom, o.Held, o.Republished)
	case soakFallback, soakNoHandoff:
		if o.Reason != "" {
			fmt.Fprintf(&b, " (%s)", o.Reason)
		}
	}
	fmt.Fprintf(&b, "; lost %d, unserved %d", o.Lost, o.Unserved)
	return b.String()
}
