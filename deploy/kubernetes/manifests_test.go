package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The parts of the manifests the checks read.
type (
	manifest struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   meta              `yaml:"metadata"`
		Spec       spec              `yaml:"spec"`
		Data       map[string]string `yaml:"data"`
	}
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	spec struct {
		ClusterIP                string        `yaml:"clusterIP"`
		PublishNotReadyAddresses bool          `yaml:"publishNotReadyAddresses"`
		Selector                 yaml.Node     `yaml:"selector"`
		Ports                    []servicePort `yaml:"ports"`
		ServiceName              string        `yaml:"serviceName"`
		Template                 struct {
			Metadata meta
			Spec     podSpec
		} `yaml:"template"`
	}
	servicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
		Protocol   string `yaml:"protocol"`
	}
	podSpec struct {
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
		Env  []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
				SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		ReadinessProbe probe `yaml:"readinessProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
)

// load parses every manifest in this directory, by kind and name.
func load(t *testing.T) map[string]manifest {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("manifests: %v, %v", files, err)
	}
	out := map[string]manifest{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var m manifest
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or name: %+v", f, m)
			}
			id := m.Kind + "/" + m.Metadata.Name
			if _, dup := out[id]; dup {
				t.Fatalf("%s: %s twice", f, id)
			}
			out[id] = m
		}
	}
	return out
}

func get(t *testing.T, all map[string]manifest, id string) manifest {
	t.Helper()
	m, ok := all[id]
	if !ok {
		t.Fatalf("no %s among the manifests", id)
	}
	return m
}

// selects reports whether a Service or workload selector picks labels.
func selects(t *testing.T, sel yaml.Node, labels map[string]string) bool {
	t.Helper()
	var m map[string]string
	if err := sel.Decode(&m); err != nil {
		var wl struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		if err := sel.Decode(&wl); err != nil {
			t.Fatal(err)
		}
		m = wl.MatchLabels
	}
	if len(m) == 0 {
		return false
	}
	for k, v := range m {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func portOf(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The manifests agree with each other and with the example service's flags:
// ports, names, the rules file, the probes, the secret.
func TestManifests(t *testing.T) {
	all := load(t)
	dep := get(t, all, "Deployment/ringlimit-example")
	pod := dep.Spec.Template
	if !selects(t, dep.Spec.Selector, pod.Metadata.Labels) {
		t.Fatalf("the Deployment's selector does not pick its pods")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "10.1.2.3" // what the kubelet fills in
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = strings.Repeat("ab", 32)
		}
	}
	for _, name := range []string{"POD_NAME", "POD_IP", SecretEnv} {
		if env[name] == "" {
			t.Fatalf("the container does not set %s", name)
		}
	}
	cfg, err := parseFlags(ctr.Args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the container's args %q: %v", ctr.Args, err)
	}
	if cfg.advertise == "" || len(cfg.secret) != 32 {
		t.Fatalf("POD_IP or the secret not taken from the environment: %+v", cfg)
	}

	// Container ports: what the flags listen on, gossip on TCP and UDP.
	ports := map[string]int{} // name/protocol → port
	for _, p := range ctr.Ports {
		ports[p.Name+"/"+p.Protocol] = p.ContainerPort
	}
	wantPorts := map[string]int{
		"http/TCP":       portOf(t, cfg.http),
		"gossip-tcp/TCP": portOf(t, cfg.gossip),
		"gossip-udp/UDP": portOf(t, cfg.gossip),
		"rpc/TCP":        portOf(t, cfg.rpc),
	}
	for k, want := range wantPorts {
		if ports[k] != want {
			t.Errorf("container port %s = %d, the flags listen on %d", k, ports[k], want)
		}
	}
	byName := map[string]int{}
	for _, p := range ctr.Ports {
		byName[p.Name] = p.ContainerPort
	}

	// The headless Service: the -join name, every peer port, not-ready
	// pods published.
	if len(cfg.join) != 1 {
		t.Fatalf("-join %v: want the headless Service", cfg.join)
	}
	joinHost, _, _ := net.SplitHostPort(cfg.join[0])
	peers := get(t, all, "Service/"+strings.Split(joinHost, ".")[0])
	if peers.Spec.ClusterIP != "None" || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("the peers' Service must be headless with publishNotReadyAddresses: %+v", peers.Spec)
	}
	if !selects(t, peers.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("the peers' Service does not select the pods")
	}
	for _, p := range peers.Spec.Ports {
		if byName[p.TargetPort] == 0 || p.Port != byName[p.TargetPort] {
			t.Errorf("peers' Service port %+v: the container's %q is %d", p, p.TargetPort, byName[p.TargetPort])
		}
		if p.Name == "gossip-tcp" && p.Port != portOf(t, cfg.join[0]) {
			t.Errorf("-join port %d, the gossip port %d", portOf(t, cfg.join[0]), p.Port)
		}
	}
	if len(peers.Spec.Ports) != 3 {
		t.Errorf("the peers' Service has %d ports, want gossip TCP, gossip UDP and rpc", len(peers.Spec.Ports))
	}
	api := get(t, all, "Service/ringlimit-example")
	if !selects(t, api.Spec.Selector, pod.Metadata.Labels) || len(api.Spec.Ports) != 1 || byName[api.Spec.Ports[0].TargetPort] != portOf(t, cfg.http) {
		t.Errorf("the API Service does not reach the HTTP port: %+v", api.Spec)
	}

	// Probes on the HTTP port: readiness is the node's Ready.
	if p := ctr.ReadinessProbe.HTTPGet; p.Path != "/readyz" || byName[p.Port] != portOf(t, cfg.http) {
		t.Errorf("readiness probe %+v", p)
	}
	if p := ctr.LivenessProbe.HTTPGet; p.Path != "/healthz" || byName[p.Port] != portOf(t, cfg.http) {
		t.Errorf("liveness probe %+v", p)
	}

	// The rules file: mounted from the ConfigMap, under the key -rules
	// names, and it parses.
	dir, file := path.Split(cfg.rules)
	var vol string
	for _, m := range ctr.VolumeMounts {
		if strings.TrimSuffix(m.MountPath, "/")+"/" == dir {
			vol = m.Name
		}
	}
	var cmName string
	for _, v := range pod.Spec.Volumes {
		if v.Name == vol {
			cmName = v.ConfigMap.Name
		}
	}
	cm := get(t, all, "ConfigMap/"+cmName)
	if _, err := rules.Parse([]byte(cm.Data[file])); err != nil || cm.Data[file] == "" {
		t.Errorf("ConfigMap %s key %s: %v", cmName, file, err)
	}

	// The store: -valkey names the Valkey Service and its port, and the
	// StatefulSet behind it listens there.
	if len(cfg.valkey) != 1 {
		t.Fatalf("-valkey %v", cfg.valkey)
	}
	vHost, _, _ := net.SplitHostPort(cfg.valkey[0])
	vsvc := get(t, all, "Service/"+vHost)
	sts := get(t, all, "StatefulSet/"+vHost)
	if sts.Spec.ServiceName != vHost || !selects(t, vsvc.Spec.Selector, sts.Spec.Template.Metadata.Labels) {
		t.Errorf("the Valkey Service does not select the StatefulSet")
	}
	vctr := sts.Spec.Template.Spec.Containers[0]
	if len(vsvc.Spec.Ports) != 1 || vsvc.Spec.Ports[0].Port != portOf(t, cfg.valkey[0]) ||
		len(vctr.Ports) != 1 || vctr.Ports[0].ContainerPort != portOf(t, cfg.valkey[0]) {
		t.Errorf("Valkey ports: Service %+v, container %+v, -valkey %s", vsvc.Spec.Ports, vctr.Ports, cfg.valkey[0])
	}
}

// Bad flags are refused.
func TestParseFlags(t *testing.T) {
	env := func(string) string { return "" }
	for _, args := range [][]string{{"-http=8080"}, {"-advertise=pod-1"}, {"extra"}, {"-nope"}, {"-max-conns=0"}, {"-idle-timeout=0s"},
		{"-drain=-1s"}, {"-trusted-proxies=10.0.0.0"}} {
		if _, err := parseFlags(args, env); !errors.Is(err, errBadFlag) {
			t.Errorf("parseFlags(%q): %v, want errBadFlag", args, err)
		}
	}
	if _, err := parseFlags([]string{"-h"}, env); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if _, err := parseFlags(nil, func(k string) string { return map[string]string{SecretEnv: "xyz"}[k] }); err == nil {
		t.Error("a secret that is not hex accepted")
	}
	c, err := parseFlags([]string{"-gossip=:7000"}, func(k string) string { return map[string]string{"POD_NAME": "p-1"}[k] })
	if err != nil || c.name != "p-1" || c.nodeConfig(nil).GossipAddr != "0.0.0.0:7000" {
		t.Fatalf("%+v, %v", c, err)
	}
}

type readyFlag bool

func (r *readyFlag) Ready() bool { return bool(*r) }

// /readyz follows Ready; /healthz is always 200.
func TestProbes(t *testing.T) {
	var ready readyFlag
	mux := http.NewServeMux()
	probes(mux, &ready)
	status := func(p string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		return rec.Code
	}
	if status("/readyz") != http.StatusServiceUnavailable || status("/healthz") != http.StatusOK {
		t.Fatalf("not ready: readyz %d, healthz %d", status("/readyz"), status("/healthz"))
	}
	ready = true
	if status("/readyz") != http.StatusOK {
		t.Fatalf("ready: readyz %d", status("/readyz"))
	}
}

// The example service builds as the Dockerfile and image.sh build it
// (-trimpath, so this build's compiled packages are the ones image.sh
// reuses in TestImage and TestContainerQuickStart), and the binary answers
// -h, -version and a bad flag as a user expects.
func TestBuild(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command on PATH")
	}
	bin := filepath.Join(t.TempDir(), "ringlimit-example")
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// -h: exit status 0, every flag listed with its default.
	out, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v\n%s", err, out)
	}
	var c config
	var s string
	flags(&c, &s, &s, &s).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(out), "\n  -"+f.Name+" ") && !strings.Contains(string(out), "\n  -"+f.Name+"\n") {
			t.Errorf("-h does not list -%s", f.Name)
		}
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(string(out), "(default "+strconv.Quote(f.DefValue)+")") &&
			!strings.Contains(string(out), "(default "+f.DefValue+")") {
			t.Errorf("-h does not give -%s's default %q", f.Name, f.DefValue)
		}
	})
	// -version: the module's version, exit status 0.
	out, err = exec.Command(bin, "-version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ringlimit-example "+ringlimit.Version {
		t.Errorf("-version: %q, %v; want ringlimit-example %s", out, err, ringlimit.Version)
	}
	// A bad flag: exit status 1, and a pointer to -h.
	out, err = exec.Command(bin, "-no-such-flag").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "-h lists the flags") {
		t.Errorf("a bad flag: %v\n%s", err, out)
	}
}
