package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags([]string{"-h"}, noEnv, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"-name", "-gossip", "-peer", "-join", "-secret-file", "-store", "-config",
		"-grpc", `(default ":8081")`, "-http", `(default ":8080")`, "-merge-domains", "-version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not list %s:\n%s", want, out.String())
		}
	}
}

func TestNoArguments(t *testing.T) {
	o, err := parseFlags(nil, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.grpc != ":8081" || o.http != ":8080" || o.config != "" || len(o.join) != 0 || len(o.store) != 0 || o.secret != nil {
		t.Fatalf("defaults: %+v", o)
	}
	if o.name == "" {
		t.Fatal("no name from the host name")
	}
}

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "s")
	os.WriteFile(secret, []byte("\n\t"+strings.Repeat("0f", 32)+"  \n"), 0o600)
	o, err := parseFlags([]string{"-join", "a:7946, rl.ns.svc:7946", "-store", "v1:6379,v2:6379", "-secret-file", secret, "-merge-domains"},
		func(k string) string { return map[string]string{"POD_NAME": "pod-1", "POD_IP": "10.0.0.9"}[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.name != "pod-1" || o.advertise != "10.0.0.9" || len(o.secret) != 32 || o.secret[0] != 0x0f || !o.merge {
		t.Fatalf("%+v", o)
	}
	if strings.Join(o.join, "|") != "a:7946|rl.ns.svc:7946" || strings.Join(o.store, "|") != "v1:6379|v2:6379" {
		t.Fatalf("join %q store %q", o.join, o.store)
	}
	nc := o.nodeConfig(nil)
	if nc.GossipAddr != "0.0.0.0:7946" || nc.GossipAdvertise != "10.0.0.9:7946" || nc.RPCAdvertise != "10.0.0.9:7947" {
		t.Fatalf("node config %+v", nc)
	}
}

func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(strings.Repeat("ab", 16)), 0o600)
	nothex := filepath.Join(dir, "nothex")
	os.WriteFile(nothex, []byte(strings.Repeat("zz", 32)), 0o600)
	for _, args := range [][]string{
		{"-secret-file", short},
		{"-secret-file", nothex},
		{"-secret-file", filepath.Join(dir, "missing")},
		{"-grpc", "nocolon"},
		{"-advertise", "host.name"},
		{"extra"},
		{"-gossip-timing", "slow"},
	} {
		if _, err := parseFlags(args, noEnv, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
