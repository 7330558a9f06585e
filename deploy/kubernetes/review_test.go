package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The checks of a strict review, on the manifests as generic YAML: what the
// "restricted" Pod Security Standard requires, disruption and memory
// budgets, a shutdown that fits its grace period, scraping, the store's
// AUTH, memory policy and headless Service, pinned images, trusted proxies
// and a NetworkPolicy that keeps the peer ports to the replicas.

// docs parses every manifest in this directory, by kind/name.
func docs(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	out := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[fmt.Sprint(m["kind"])+"/"+fmt.Sprint(dig(m, "metadata", "name"))] = m
		}
	}
	return out
}

// dig follows map keys (string) and list indexes (int) from v; nil if a
// step is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func seq(v any) []any { l, _ := v.([]any); return l }

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// bytesOf parses a Kubernetes quantity (Mi, Gi), a GOMEMLIMIT (MiB, GiB)
// or a Valkey size (mb, gb).
func bytesOf(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(Ki|Mi|Gi|KiB|MiB|GiB|kb|mb|gb)$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("size %q: not understood", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	switch strings.ToLower(m[2][:1]) {
	case "k":
		return n << 10
	case "m":
		return n << 20
	}
	return n << 30
}

// workloads are the pod templates of every Deployment and StatefulSet.
func workloads(all map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, m := range all {
		if k := m["kind"]; k == "Deployment" || k == "StatefulSet" {
			out[id] = m
		}
	}
	return out
}

// Every pod passes the "restricted" Pod Security Standard, has requests and
// a memory limit, and runs a pinned image.
func TestReviewPods(t *testing.T) {
	all := docs(t)
	wl := workloads(all)
	if len(wl) != 2 {
		t.Fatalf("workloads %v", wl)
	}
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:v?\d+\.\d+\.\d+$|@sha256:[0-9a-f]{64}$`)
	for id, w := range wl {
		pod := dig(w, "spec", "template", "spec")
		psc := dig(pod, "securityContext")
		if dig(psc, "runAsNonRoot") != true || dig(psc, "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: pod securityContext %v: want runAsNonRoot and seccomp RuntimeDefault", id, psc)
		}
		if dig(pod, "automountServiceAccountToken") != false {
			t.Errorf("%s: mounts a service account token it does not use", id)
		}
		for i, c := range seq(dig(pod, "containers")) {
			name := fmt.Sprintf("%s container %d", id, i)
			sc := dig(c, "securityContext")
			if dig(sc, "allowPrivilegeEscalation") != false || dig(sc, "readOnlyRootFilesystem") != true ||
				!slices.Contains(seq(dig(sc, "capabilities", "drop")), any("ALL")) || dig(sc, "privileged") == true {
				t.Errorf("%s: securityContext %v: want allowPrivilegeEscalation false, readOnlyRootFilesystem, drop ALL", name, sc)
			}
			if img := str(dig(c, "image")); !pinned.MatchString(img) {
				t.Errorf("%s: image %q is not pinned to a version", name, img)
			}
			res := dig(c, "resources")
			for _, k := range [][]any{{"requests", "cpu"}, {"requests", "memory"}, {"limits", "memory"}} {
				if str(dig(res, k...)) == "" {
					t.Errorf("%s: no resources.%s.%s", name, k[0], k[1])
				}
			}
			if str(dig(c, "readinessProbe")) == "" || str(dig(c, "livenessProbe")) == "" {
				t.Errorf("%s: readiness and liveness probes wanted", name)
			}
		}
	}
}

// The example's pods: GOMEMLIMIT under the memory limit, spread over nodes,
// a disruption budget, scraped, and a shutdown that fits its grace period
// with readiness false before the hand-off.
func TestReviewExample(t *testing.T) {
	all := docs(t)
	dep := all["Deployment/ringlimit-example"]
	tmpl := dig(dep, "spec", "template")
	pod := dig(tmpl, "spec")
	ctr := dig(pod, "containers", 0)
	labels := dig(tmpl, "metadata", "labels").(map[string]any)
	picks := func(sel any) bool {
		m, _ := dig(sel, "matchLabels").(map[string]any)
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
	env := map[string]any{}
	for _, e := range seq(dig(ctr, "env")) {
		env[str(dig(e, "name"))] = e
	}
	var args []string
	for _, a := range seq(dig(ctr, "args")) {
		args = append(args, str(a))
	}
	cfg, err := parseFlags(args, func(k string) string {
		return map[string]string{"POD_IP": "10.1.2.3", SecretEnv: strings.Repeat("ab", 32), PasswordEnv: "pw"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}

	// Memory: GOMEMLIMIT below the limit with room for the runtime, and
	// the node's own bound (node.Config.MaxBytes, 256 MiB) below that.
	limit := bytesOf(t, str(dig(ctr, "resources", "limits", "memory")))
	gml := str(dig(env["GOMEMLIMIT"], "value"))
	if gml == "" {
		t.Fatal("no GOMEMLIMIT")
	}
	if g := bytesOf(t, gml); g > limit*9/10 || g <= 256<<20 {
		t.Errorf("GOMEMLIMIT %s: want above MaxBytes (256 MiB) and at most 90 %% of the limit %d", gml, limit)
	}

	// Spread: across nodes, required, over these pods.
	spread := false
	for _, c := range seq(dig(pod, "topologySpreadConstraints")) {
		if dig(c, "topologyKey") == "kubernetes.io/hostname" && dig(c, "whenUnsatisfiable") == "DoNotSchedule" && picks(dig(c, "labelSelector")) {
			spread = true
		}
	}
	if !spread {
		t.Error("no topology spread over nodes (kubernetes.io/hostname, DoNotSchedule) for the pods")
	}

	// A disruption budget that lets a drain through one pod at a time.
	pdb := all["PodDisruptionBudget/ringlimit-example"]
	replicas, _ := dig(dep, "spec", "replicas").(int)
	maxU, _ := dig(pdb, "spec", "maxUnavailable").(int)
	minA, hasMin := dig(pdb, "spec", "minAvailable").(int)
	if pdb == nil || !picks(dig(pdb, "spec", "selector")) || (maxU < 1 && (!hasMin || minA >= replicas || minA < 1)) {
		t.Errorf("PodDisruptionBudget %v: want one selecting the pods that allows one disruption of %d replicas", dig(pdb, "spec"), replicas)
	}

	// Scraped at the HTTP port's /metrics (the handler is tested in TestDefaults).
	ann := dig(tmpl, "metadata", "annotations")
	if dig(ann, "prometheus.io/scrape") != "true" || dig(ann, "prometheus.io/path") != "/metrics" ||
		str(dig(ann, "prometheus.io/port")) != strconv.Itoa(portOf(t, cfg.http)) {
		t.Errorf("scrape annotations %v: want scrape, /metrics and port %d", ann, portOf(t, cfg.http))
	}

	// Shutdown: preStop, then the drain with /readyz false (the example's
	// shutdown, TestShutdownDrainsBeforeHandoff), then requests in flight,
	// then the hand-off and leave (at most 5 s): all within the grace.
	preStop := dig(ctr, "lifecycle", "preStop")
	secs, ok := dig(preStop, "sleep", "seconds").(int)
	if !ok || secs < 1 {
		t.Fatalf("preStop %v: want a sleep while the endpoints are updated", preStop)
	}
	if cfg.drain <= 0 {
		t.Errorf("-drain %v: readiness must go false before the hand-off starts", cfg.drain)
	}
	grace, _ := dig(pod, "terminationGracePeriodSeconds").(int)
	need := time.Duration(secs)*time.Second + cfg.drain + cfg.grace + 5*time.Second
	if time.Duration(grace)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d: preStop + drain + shutdown + leave need %v", grace, need)
	}
	if p, _ := dig(ctr, "readinessProbe", "periodSeconds").(int); p == 0 || time.Duration(p)*time.Second > cfg.drain {
		t.Errorf("readiness probed every %d s: the drain (%v) must outlast a probe period", p, cfg.drain)
	}

	// Behind an ingress, `key: ip` must see the client, not the proxy; and
	// only the ingress: a range as wide as a pod network (10.0.0.0/8 was
	// here) lets any pod in it send its own X-Forwarded-For.
	if len(cfg.trusted) == 0 {
		t.Error("no -trusted-proxies: behind an ingress every client shares one budget")
	}
	for _, p := range cfg.trusted {
		if p.Bits() < 20 {
			t.Errorf("-trusted-proxies %v: wider than an ingress's range (/20 at most)", p)
		}
	}

	// Connections: capped, idle ones closed, and their memory fits beside
	// the node's state under GOMEMLIMIT (an idle keep-alive: about 20 KiB;
	// 15,000 took 309 MiB).
	if cfg.idle <= 0 || cfg.maxConns <= 0 {
		t.Errorf("-idle-timeout %v, -max-conns %d", cfg.idle, cfg.maxConns)
	}
	if conns := int64(cfg.maxConns) * 21 << 10; conns+256<<20 > bytesOf(t, gml) {
		t.Errorf("-max-conns %d: %d MiB of connections and 256 MiB of state exceed GOMEMLIMIT %s", cfg.maxConns, conns>>20, gml)
	}

	// The store's password: the replicas and Valkey read the same Secret key.
	ref := func(e any) string {
		r := dig(e, "valueFrom", "secretKeyRef")
		if r == nil {
			return ""
		}
		return str(dig(r, "name")) + "/" + str(dig(r, "key"))
	}
	if ref(env[PasswordEnv]) == "" || ref(env[SecretEnv]) == "" {
		t.Errorf("%s and %s must come from Secrets", PasswordEnv, SecretEnv)
	}
	// Valkey reads it from a mounted file that its config file includes;
	// nothing secret is on its command line or in its environment.
	vpod := dig(all["StatefulSet/valkey"], "spec", "template", "spec")
	vctr := dig(vpod, "containers", 0)
	var cmdline []string
	for _, a := range append(seq(dig(vctr, "command")), seq(dig(vctr, "args"))...) {
		cmdline = append(cmdline, str(a))
	}
	if line := strings.Join(cmdline, " "); strings.Contains(line, "requirepass") || strings.Contains(line, "$(") || len(seq(dig(vctr, "env"))) > 0 {
		t.Errorf("Valkey's command line %q or environment carries the password", line)
	}
	conf, include := valkeyConfig(t, all, vpod, cmdline)
	if !strings.HasPrefix(include, "secret:") || strings.TrimPrefix(include, "secret:") != strings.Split(ref(env[PasswordEnv]), "/")[0] {
		t.Errorf("Valkey's config includes %q: want a file of the Secret the replicas' password comes from (%s)", include, ref(env[PasswordEnv]))
	}
	if !slices.Contains([]string{"volatile-ttl", "volatile-lru", "allkeys-lru", "volatile-lfu", "allkeys-lfu"}, conf["maxmemory-policy"]) {
		t.Errorf("Valkey maxmemory-policy %q: want one that evicts (noeviction fails writes)", conf["maxmemory-policy"])
	}
	if mm := conf["maxmemory"]; mm == "" || bytesOf(t, mm) >= bytesOf(t, str(dig(vctr, "resources", "limits", "memory"))) {
		t.Errorf("Valkey maxmemory %q: want one below the container's memory limit", mm)
	}
	vsvc := all["Service/valkey"]
	if dig(vsvc, "spec", "clusterIP") != "None" || dig(all["StatefulSet/valkey"], "spec", "serviceName") != "valkey" {
		t.Errorf("the StatefulSet's serviceName must be a headless Service (valkey-0.valkey resolves)")
	}
}

// A NetworkPolicy opens gossip and the peer link to the example's own pods
// only; the API port stays open; Valkey answers the example's pods only.
func TestReviewNetworkPolicy(t *testing.T) {
	all := docs(t)
	peerPorts := map[string]bool{"7946/TCP": true, "7946/UDP": true, "7947/TCP": true}
	self := map[string]any{"app": "ringlimit-example"}
	onlySelf := func(from []any) bool {
		if len(from) == 0 {
			return false // from anywhere
		}
		for _, f := range from {
			m, _ := f.(map[string]any)
			sel, _ := dig(m, "podSelector", "matchLabels").(map[string]any)
			if len(m) != 1 || len(sel) != len(self) || sel["app"] != self["app"] {
				return false // a namespaceSelector, an ipBlock or other pods
			}
		}
		return true
	}
	check := func(id string, podApp string, private map[string]bool, public map[string]bool) {
		np := all["NetworkPolicy/"+id]
		if np == nil {
			t.Errorf("no NetworkPolicy %s", id)
			return
		}
		if str(dig(np, "spec", "podSelector", "matchLabels", "app")) != podApp || !slices.Contains(seq(dig(np, "spec", "policyTypes")), any("Ingress")) {
			t.Errorf("NetworkPolicy %s does not govern ingress to the %s pods", id, podApp)
		}
		opened := map[string]bool{}
		for _, r := range seq(dig(np, "spec", "ingress")) {
			ports := seq(dig(r, "ports"))
			if len(ports) == 0 {
				t.Errorf("NetworkPolicy %s: a rule opens every port", id)
			}
			for _, p := range ports {
				k := str(dig(p, "port")) + "/" + str(dig(p, "protocol"))
				if private[k] && !onlySelf(seq(dig(r, "from"))) {
					t.Errorf("NetworkPolicy %s: port %s open beyond the example's pods", id, k)
				}
				opened[k] = true
			}
		}
		for k := range private {
			if !opened[k] {
				t.Errorf("NetworkPolicy %s: port %s not opened to the example's pods", id, k)
			}
		}
		for k := range public {
			if !opened[k] {
				t.Errorf("NetworkPolicy %s: port %s closed", id, k)
			}
		}
	}
	check("ringlimit-example", "ringlimit-example", peerPorts, map[string]bool{"8080/TCP": true})
	check("valkey", "valkey", map[string]bool{"6379/TCP": true}, nil)

	// Port 8080 admits named pods of named namespaces only (the ingress
	// controller's, and the monitoring namespace's Prometheus), never every
	// pod: each entry has both selectors, and no rule opens it to all.
	np := all["NetworkPolicy/ringlimit-example"]
	monitoring := false
	for _, r := range seq(dig(np, "spec", "ingress")) {
		opens8080 := false
		for _, p := range seq(dig(r, "ports")) {
			opens8080 = opens8080 || str(dig(p, "port")) == "8080"
		}
		if !opens8080 {
			continue
		}
		from := seq(dig(r, "from"))
		if len(from) == 0 {
			t.Errorf("port 8080 is open to every pod")
		}
		for _, f := range from {
			ns := str(dig(f, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"))
			pods, _ := dig(f, "podSelector", "matchLabels").(map[string]any)
			if ns == "" || len(pods) == 0 || dig(f, "ipBlock") != nil {
				t.Errorf("port 8080 admits %v: want one namespace's labelled pods", f)
			}
			monitoring = monitoring || ns == "monitoring" && pods["app.kubernetes.io/name"] == "prometheus"
		}
	}
	if !monitoring {
		t.Error("port 8080 does not admit the monitoring namespace's Prometheus: /metrics goes unscraped")
	}
}

// valkeyConfig reads the Valkey config file the command line names, from
// the ConfigMap mounted there: its directives, and where its include points
// ("secret:NAME" for a file of a mounted Secret holding the key).
func valkeyConfig(t *testing.T, all map[string]map[string]any, pod any, cmdline []string) (map[string]string, string) {
	t.Helper()
	if len(cmdline) != 2 || !strings.HasSuffix(cmdline[1], ".conf") {
		t.Fatalf("Valkey's command line %q: want the server and its config file", cmdline)
	}
	// volume path → the volume mounted over it
	mounted := func(file string) (map[string]any, string) {
		dir, base := path.Split(file)
		for _, m := range seq(dig(pod, "containers", 0, "volumeMounts")) {
			if strings.TrimSuffix(str(dig(m, "mountPath")), "/")+"/" == dir {
				for _, v := range seq(dig(pod, "volumes")) {
					if dig(v, "name") == dig(m, "name") {
						vm, _ := v.(map[string]any)
						return vm, base
					}
				}
			}
		}
		return nil, ""
	}
	vol, key := mounted(cmdline[1])
	cm := all["ConfigMap/"+str(dig(vol, "configMap", "name"))]
	text := str(dig(cm, "data", key))
	if text == "" {
		t.Fatalf("Valkey's config %s: no ConfigMap key mounted there", cmdline[1])
	}
	conf := map[string]string{}
	include := ""
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		conf[f[0]] = f[1]
		if f[0] == "include" {
			v, k := mounted(f[1])
			name := str(dig(v, "secret", "secretName"))
			for _, it := range seq(dig(v, "secret", "items")) {
				if dig(it, "path") == k && name != "" {
					include = "secret:" + name
				}
			}
		}
	}
	return conf, include
}

// The manifests of this directory are Kubernetes' own kinds, so that
// `kubectl apply -f deploy/kubernetes/` works on any cluster; the
// Prometheus Operator's (PodMonitor, PrometheusRule) are in monitoring/.
func TestReviewBuiltinKinds(t *testing.T) {
	builtin := map[string]bool{"v1": true, "apps/v1": true, "policy/v1": true, "networking.k8s.io/v1": true}
	all := docs(t)
	for id, m := range all {
		if !builtin[str(m["apiVersion"])] {
			t.Errorf("%s: apiVersion %v is not Kubernetes' own", id, m["apiVersion"])
		}
	}
	if len(all) < 8 {
		t.Errorf("%d manifests", len(all))
	}
}
