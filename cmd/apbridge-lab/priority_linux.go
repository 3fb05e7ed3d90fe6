package main

import (
	"fmt"
	"os/exec"
	"syscall"
)

// startAtPriority starts cmd with the given nice value (0-19). Linux keeps
// a nice value per thread, a new thread inherits its creator's, and
// setpriority on a process ID sets one thread's only; on a process group
// it sets every thread of the group. So the child starts in a group of its
// own and the group is given the value twice: right after the start, and
// again once the runtime's first threads are surely made (a thread made
// during the first call could copy its creator's value from before it).
// Raising a nice value needs no privilege, and this process's own threads
// are not touched.
func startAtPriority(cmd *exec.Cmd, nice int) error {
	if nice == 0 {
		return cmd.Start()
	}
	if nice < 0 || nice > 19 {
		return fmt.Errorf("nice %d: out of range (0-19)", nice)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return err
	}
	return renice(cmd, nice)
}

// renice gives every thread of cmd's process group the nice value.
func renice(cmd *exec.Cmd, nice int) error {
	if err := syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, nice); err != nil {
		return fmt.Errorf("nice %d: %w", nice, err)
	}
	return nil
}
