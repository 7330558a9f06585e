package main

import "syscall"

// childAttr makes a child die with this process (SIGKILL when it goes) and
// puts it in its own process group, so a terminal's Ctrl-C reaches only the
// supervisor, which then stops the children in order.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
