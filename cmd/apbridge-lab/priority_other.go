//go:build !linux

package main

import "os/exec"

// startAtPriority starts cmd; the nice value is a Linux one and is not
// applied here.
func startAtPriority(cmd *exec.Cmd, _ int) error { return cmd.Start() }

func renice(*exec.Cmd, int) error { return nil }
