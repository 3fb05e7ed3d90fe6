package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// threadNices reads the nice value of every thread of a process from
// /proc (field 19 of each task's stat, counted after the command's name
// in parentheses).
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	var nices []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		n, err := strconv.Atoi(f[16]) // f starts at field 3
		if err != nil {
			t.Fatal(err)
		}
		nices = append(nices, n)
	}
	return nices
}

func allAre(nices []int, want int) bool {
	for _, n := range nices {
		if n != want {
			return false
		}
	}
	return true
}

// TestStartAtPriority starts a child niced and one not (the control): the
// niced one has the value, the other and this process's threads keep
// theirs.
func TestStartAtPriority(t *testing.T) {
	own := threadNices(t, os.Getpid())
	if !allAre(own, own[0]) || own[0] == 19 {
		t.Skipf("this process's threads run at nice %v", own)
	}
	start := func(nice int) []int {
		t.Helper()
		cmd := exec.Command("sleep", "30")
		if err := startAtPriority(cmd, nice); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		return threadNices(t, cmd.Process.Pid)
	}
	if got := start(0); !allAre(got, own[0]) {
		t.Fatalf("control: child at nice %v, want this process's %d", got, own[0])
	}
	if got := start(19); !allAre(got, 19) {
		t.Fatalf("niced child at nice %v, want 19", got)
	}
	if got := threadNices(t, os.Getpid()); !allAre(got, own[0]) {
		t.Fatalf("this process's threads at nice %v after the niced start, want %d", got, own[0])
	}
	if err := startAtPriority(exec.Command("true"), 20); err == nil {
		t.Fatal("nice 20 accepted")
	}
}

// TestEdgeHubProcessNiced starts the WAN scenarios' hub process as the
// bench does by default: every thread of it, the Go runtime's and the
// servers', runs at nice 19.
func TestEdgeHubProcessNiced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := startHubChild(ctx, false, 19)
	if err != nil {
		t.Fatal(err)
	}
	defer h.stop()
	if got := threadNices(t, h.cmd.Process.Pid); len(got) < 2 || !allAre(got, 19) {
		t.Fatalf("hub process threads at nice %v, want all 19", got)
	}
}
