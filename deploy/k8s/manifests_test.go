package k8s

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded documents of every file kustomization.yaml
// lists.
type manifests struct {
	deployment *appsv1.Deployment
	services   []*corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	configMap  *corev1.ConfigMap
}

// load decodes the files strictly (an unknown or misspelt field is an
// error) into the API types of their kinds.
func load(t *testing.T) *manifests {
	t.Helper()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	decode(t, "kustomization.yaml", read(t, "kustomization.yaml"), &kust)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	slices.Sort(files)
	listed := slices.Sorted(slices.Values(kust.Resources))
	if !slices.Equal(files, listed) {
		t.Errorf("kustomization.yaml lists %v, the directory has %v", listed, files)
	}
	m := &manifests{}
	for _, f := range listed {
		for i, doc := range bytes.Split(read(t, f), []byte("\n---\n")) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			where := f + " document " + strconv.Itoa(i)
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				m.deployment = new(appsv1.Deployment)
				decode(t, where, doc, m.deployment)
			case "v1 Service":
				s := new(corev1.Service)
				decode(t, where, doc, s)
				m.services = append(m.services, s)
			case "policy/v1 PodDisruptionBudget":
				m.pdb = new(policyv1.PodDisruptionBudget)
				decode(t, where, doc, m.pdb)
			case "v1 ConfigMap":
				m.configMap = new(corev1.ConfigMap)
				decode(t, where, doc, m.configMap)
			default:
				t.Fatalf("%s: unexpected kind %s %s", where, meta.APIVersion, meta.Kind)
			}
		}
	}
	if m.deployment == nil || len(m.services) == 0 || m.pdb == nil || m.configMap == nil {
		t.Fatalf("want a Deployment, Services, a PodDisruptionBudget and a ConfigMap; got %+v", m)
	}
	return m
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, where string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// config is what the test reads of limiterd.yaml.
type config struct {
	GRPCAddr        string `json:"grpc_addr"`
	HTTPAddr        string `json:"http_addr"`
	RESPAddr        string `json:"resp_addr"`
	ShutdownTimeout string `json:"shutdown_timeout"`
	DrainDelay      string `json:"drain_delay"`
	StopTimeout     string `json:"stop_timeout"`
}

const configKey = "limiterd.yaml"

func (m *manifests) config(t *testing.T) config {
	t.Helper()
	data, ok := m.configMap.Data[configKey]
	if !ok {
		t.Fatalf("the ConfigMap has no %s", configKey)
	}
	var c config
	if err := yaml.Unmarshal([]byte(data), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (m *manifests) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0]
}

// port is the port number of addr ("host:port").
func port(t *testing.T, field, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	return int32(n)
}

// TestPorts: the container's named ports are the config's listeners, on
// every interface, and every Service port targets one of them.
func TestPorts(t *testing.T) {
	m := load(t)
	c, cfg := m.container(t), m.config(t)
	byName := map[string]int32{}
	for _, p := range c.Ports {
		byName[p.Name] = p.ContainerPort
	}
	for _, l := range []struct{ name, field, addr string }{
		{"grpc", "grpc_addr", cfg.GRPCAddr}, {"http", "http_addr", cfg.HTTPAddr}, {"resp", "resp_addr", cfg.RESPAddr},
	} {
		if !strings.HasPrefix(l.addr, "0.0.0.0:") {
			t.Errorf("%s = %q: the pod's address is not loopback; want 0.0.0.0:port", l.field, l.addr)
		}
		if got, want := byName[l.name], port(t, l.field, l.addr); got != want {
			t.Errorf("container port %s = %d, want %d (%s)", l.name, got, want, l.field)
		}
	}
	names := map[string]bool{}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			names[p.Name] = true
			if p.TargetPort.Type != intstr.String || byName[p.TargetPort.StrVal] == 0 {
				t.Errorf("service %s port %s targets %v, want a named container port", s.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	for _, n := range []string{"grpc", "http", "metrics"} {
		if !names[n] {
			t.Errorf("no Service port named %s", n)
		}
	}
	ann := m.deployment.Spec.Template.Annotations
	if ann["prometheus.io/port"] != strconv.Itoa(int(byName["http"])) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v do not point at /metrics on the http port", ann)
	}
}

// TestProbes: startup and readiness on /readyz, liveness on /healthz, all
// on the http port.
func TestProbes(t *testing.T) {
	c := load(t).container(t)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/readyz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: %+v, want an HTTP GET", p.name, p.probe)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString("http") {
			t.Errorf("%s probe: GET %s on %s, want %s on http", p.name, g.Path, g.Port.String(), p.path)
		}
	}
	if r := c.Resources; r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", r)
	}
	if r := c.Resources; r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
		t.Errorf("memory limit %s below the request %s", r.Limits.Memory(), r.Requests.Memory())
	}
}

// TestLabels: the Deployment's selector selects its pods, and so do the
// Services' and the PodDisruptionBudget's.
func TestLabels(t *testing.T) {
	m := load(t)
	pod := m.deployment.Spec.Template.Labels
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if pod[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !selects(m.deployment.Spec.Selector.MatchLabels) || len(m.deployment.Spec.Selector.MatchExpressions) > 0 {
		t.Errorf("Deployment selector %v does not select its pods %v", m.deployment.Spec.Selector, pod)
	}
	for _, s := range m.services {
		if !selects(s.Spec.Selector) {
			t.Errorf("Service %s selector %v does not select the pods %v", s.Name, s.Spec.Selector, pod)
		}
	}
	if !selects(m.pdb.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods %v", m.pdb.Spec.Selector, pod)
	}
	if m.pdb.Spec.MaxUnavailable == nil && m.pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
	for _, l := range []map[string]string{m.deployment.Labels, m.configMap.Labels, m.pdb.Labels} {
		if l["app.kubernetes.io/name"] != "limiterd" {
			t.Errorf("labels %v lack app.kubernetes.io/name: limiterd", l)
		}
	}
}

// TestDrain: the grace period covers limiterd's whole stop: its drain
// delay (5s), its fronts' stop bound (5s) and its final push bound (10s),
// plus the second the operator listeners get after them.
func TestDrain(t *testing.T) {
	m := load(t)
	c, cfg := m.container(t), m.config(t)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Errorf("preStop = %+v: limiterd drains itself (drain_delay), after its readiness dropped", c.Lifecycle.PreStop)
	}
	var total time.Duration
	for _, f := range []struct{ name, v, want string }{
		{"drain_delay", cfg.DrainDelay, "5s"}, {"stop_timeout", cfg.StopTimeout, "5s"}, {"shutdown_timeout", cfg.ShutdownTimeout, "10s"},
	} {
		d, err := time.ParseDuration(f.v)
		if err != nil || f.v != f.want {
			t.Errorf("%s %q (%v), want %s", f.name, f.v, err, f.want)
		}
		total += d
	}
	var grace time.Duration
	if g := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if want := total + time.Second; grace < want {
		t.Errorf("terminationGracePeriodSeconds = %v, want at least %v", grace, want)
	}
}

// TestConfigMount: the container reads the ConfigMap's file.
func TestConfigMount(t *testing.T) {
	m := load(t)
	c := m.container(t)
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("args %v give no --config", c.Args)
	}
	dir, file := filepath.Split(c.Args[i+1])
	if file != configKey {
		t.Errorf("--config %s, want the ConfigMap's key %s", c.Args[i+1], configKey)
	}
	var vol string
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
			vol = vm.Name
		}
	}
	var cm string
	for _, v := range m.deployment.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.ConfigMap != nil {
			cm = v.ConfigMap.Name
		}
	}
	if vol == "" || cm != m.configMap.Name {
		t.Errorf("%s is not mounted from ConfigMap %s (volume %q, config map %q)", dir, m.configMap.Name, vol, cm)
	}
}

// TestConfigAccepted runs `limiterd check` on the ConfigMap's config: the
// daemon's own loader must accept it. It builds limiterd, so -short skips
// it.
func TestConfigAccepted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds limiterd")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cfg := filepath.Join(t.TempDir(), configKey)
	if err := os.WriteFile(cfg, []byte(load(t).configMap.Data[configKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "limiterd")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/limiterd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/limiterd: %v\n%s", err, out)
	}
	check := exec.CommandContext(ctx, bin, "check", "--config", cfg)
	check.Env = []string{} // nothing from this environment reaches the check
	out, err := check.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), ": ok\n") {
		t.Errorf("limiterd check: %v\n%s", err, out)
	}
}
