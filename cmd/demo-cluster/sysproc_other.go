//go:build !linux

package main

import "syscall"

// childAttr puts a child in its own process group. Only Linux can make it die
// with its parent; elsewhere the supervisor's own cleanup is all there is.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
