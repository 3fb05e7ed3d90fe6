package uaclient_test

import (
	"testing"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
)

// sl-late-peer: the active drops to 0 while its partner still reports 90,
// and the partner rises to 250 a moment later, the order a real redundant
// pair often shows. The 0 finds the partner wanting (the stay is the
// positive control that the trigger fired), nothing switches while the
// partner is at 90, and the rise moves the data at once instead of one
// degraded window later.
func TestPairLatePeer(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 90}})
	m := r.mark()
	r.servers.A().SetLevel(0)
	stay := r.waitEvent(m, "the 0 finds the partner wanting", kind(uaclient.EventStay))
	if stay.Cause != servicelevel.CausePeerNotHealthy || stay.PeerLevel != servicelevel.LevelOf(90) {
		t.Fatalf("stay: %+v", stay)
	}
	if fo := r.eventsSince(m, uaclient.EventFailover); len(fo) != 0 {
		t.Fatalf("switched to a partner at 90: %s", fo[0].Message)
	}
	rise := r.mark()
	r.servers.B().SetLevel(250)
	fo := r.waitEvent(rise, "failover at the rise", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseStandbyHealthy || fo.PeerLevel != servicelevel.LevelOf(250) || fo.Level != servicelevel.LevelOf(0) {
		t.Fatalf("failover: %+v\n%s", fo, r.eventLog(m))
	}
	r.waitUpdates(rise, 1, "data from the backup", dataFrom(servicelevel.Backup))
}
