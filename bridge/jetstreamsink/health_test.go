package jetstreamsink

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/jsm.go/api"
)

func TestGradeCluster(t *testing.T) {
	peer := func(name string, mod func(*api.PeerInfo)) *api.PeerInfo {
		p := &api.PeerInfo{Name: name, Current: true, Active: 100 * time.Millisecond}
		if mod != nil {
			mod(p)
		}
		return p
	}
	info := func(replicas int, leader string, peers ...*api.PeerInfo) *api.StreamInfo {
		return &api.StreamInfo{Config: api.StreamConfig{Replicas: replicas},
			Cluster: &api.ClusterInfo{Leader: leader, Replicas: peers}}
	}
	tests := []struct {
		name     string
		nfo      *api.StreamInfo
		replicas int
		want     []string
	}{
		{"healthy R3", info(3, "n1", peer("n2", nil), peer("n3", nil)), 3, nil},
		{"R1 is not graded", &api.StreamInfo{Config: api.StreamConfig{Replicas: 1}}, 1, nil},
		{"not clustered", &api.StreamInfo{Config: api.StreamConfig{Replicas: 3}}, 3, []string{"Stream is not clustered"}},
		{"no leader", info(3, "", peer("n2", nil), peer("n3", nil)), 3, []string{"No leader"}},
		{"a peer missing", info(3, "n1", peer("n2", nil)), 3, []string{"Expected 3 replicas got 2"}},
		{"offline", info(3, "n1", peer("n2", func(p *api.PeerInfo) { p.Offline = true }), peer("n3", nil)), 3,
			[]string{"1 replicas offline"}},
		{"lagged", info(3, "n1", peer("n2", func(p *api.PeerInfo) { p.Lag = 1001 }), peer("n3", nil)), 3,
			[]string{"1 replicas lagged"}},
		{"inactive", info(3, "n1", peer("n2", nil), peer("n3", func(p *api.PeerInfo) { p.Active = 11 * time.Second })), 3,
			[]string{"1 replicas inactive"}},
		{"all three", info(3, "n1", peer("n2", func(p *api.PeerInfo) { p.Offline, p.Lag = true, 5000 }),
			peer("n3", func(p *api.PeerInfo) { p.Active = time.Minute })), 3,
			[]string{"1 replicas offline", "1 replicas lagged", "1 replicas inactive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gradeCluster(tt.nfo, tt.replicas, 1000, 10*time.Second)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	if got := gradeCluster(info(3, "n1", peer("n2", func(p *api.PeerInfo) { p.Lag = 1 << 40 }), peer("n3", nil)), 3, 0, 0); got != nil {
		t.Fatalf("lag and seen checks off: got %q", got)
	}
}
