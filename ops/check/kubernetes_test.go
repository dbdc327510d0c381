package check

import (
	"bufio"
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

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	manifestFile = "../kubernetes/parsley-observe.yaml"
	shardsFile   = "../kubernetes/parsley-observe-shards.yaml"
	configFile   = "../config/parsley-observe.yaml"
)

// manifest is the manifest's objects, decoded strictly.
type manifest struct {
	configMaps []corev1.ConfigMap
	pvcs       []corev1.PersistentVolumeClaim
	deploys    []appsv1.Deployment
	sets       []appsv1.StatefulSet
	services   []corev1.Service
	monitors   []monitoringv1.ServiceMonitor
}

// decodeManifest splits the file into documents and decodes each into the
// API type its apiVersion and kind name, refusing unknown fields (a
// misspelt or misplaced key), duplicate keys and unknown kinds.
func decodeManifest(t *testing.T, b []byte) manifest {
	t.Helper()
	var m manifest
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			m.configMaps = append(m.configMaps, corev1.ConfigMap{})
			obj = &m.configMaps[len(m.configMaps)-1]
		case "v1 PersistentVolumeClaim":
			m.pvcs = append(m.pvcs, corev1.PersistentVolumeClaim{})
			obj = &m.pvcs[len(m.pvcs)-1]
		case "apps/v1 Deployment":
			m.deploys = append(m.deploys, appsv1.Deployment{})
			obj = &m.deploys[len(m.deploys)-1]
		case "apps/v1 StatefulSet":
			m.sets = append(m.sets, appsv1.StatefulSet{})
			obj = &m.sets[len(m.sets)-1]
		case "v1 Service":
			m.services = append(m.services, corev1.Service{})
			obj = &m.services[len(m.services)-1]
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.monitors = append(m.monitors, monitoringv1.ServiceMonitor{})
			obj = &m.monitors[len(m.monitors)-1]
		default:
			t.Fatalf("document %d: unexpected %s %q", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("document %d (%s): %v", i, tm.Kind, err)
		}
	}
	return m
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(append(out, l...), '\n')
		}
	}
	return out
}

// TestDecodeRefusesAMisspeltField: the strict decoding this check rests
// on does catch a field the API type lacks.
func TestDecodeRefusesAMisspeltField(t *testing.T) {
	bad := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selectr: {a: b}\n")
	if err := yaml.UnmarshalStrict(bad, &corev1.Service{}); err == nil || !strings.Contains(err.Error(), "selectr") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

// TestKubernetesManifest: the manifest's objects are valid API objects
// and fit together: the Service and the ServiceMonitor select the pods
// and name their port, the probes ask the observer's endpoints, one
// replica is replaced, not rolled (one writer per SQLite store), every
// mount has its volume, and the ConfigMap is the example config file,
// whose paths lie on the mounts and whose port the container exposes.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile(manifestFile)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeManifest(t, b)
	if len(m.configMaps) != 1 || len(m.pvcs) != 1 || len(m.deploys) != 1 || len(m.services) != 1 || len(m.monitors) != 1 || len(m.sets) != 0 {
		t.Fatalf("want one each of ConfigMap, PersistentVolumeClaim, Deployment, Service, ServiceMonitor; got %d %d %d %d %d",
			len(m.configMaps), len(m.pvcs), len(m.deploys), len(m.services), len(m.monitors))
	}
	cm, pvc, d, svc, mon := m.configMaps[0], m.pvcs[0], m.deploys[0], m.services[0], m.monitors[0]

	// The Deployment.
	pod := d.Spec.Template
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Deployment's selector %v does not match its pods' labels %v (%v)", d.Spec.Selector, pod.Labels, err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("want 1 replica with the Recreate strategy: two pods must never share the store")
	}
	ports, volumes := observerPod(t, pod.Spec, cm)
	if v := volumes["data"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("the data volume is not the claim %q", pvc.Name)
	}
	scraped(t, pod.Labels, ports, svc, mon)
}

// TestKubernetesShardsManifest: the shards' manifest fits together as the
// single observer's does, and makes its pods the members of one group:
// a StatefulSet of several pods, each with a store of its own claimed per
// pod and its pod name as its member name, advertising its UI under the
// headless Service's name for it; the environment names only flags; the
// ServiceMonitor scrapes every pod, and the UI Service reaches any.
func TestKubernetesShardsManifest(t *testing.T) {
	b, err := os.ReadFile(shardsFile)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeManifest(t, b)
	if len(m.configMaps) != 1 || len(m.sets) != 1 || len(m.services) != 2 || len(m.monitors) != 1 || len(m.pvcs) != 0 || len(m.deploys) != 0 {
		t.Fatalf("want a ConfigMap, a StatefulSet, two Services and a ServiceMonitor; got %d %d %d %d (and %d claims, %d Deployments)",
			len(m.configMaps), len(m.sets), len(m.services), len(m.monitors), len(m.pvcs), len(m.deploys))
	}
	cm, set, mon := m.configMaps[0], m.sets[0], m.monitors[0]
	pod := set.Spec.Template
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the StatefulSet's selector %v does not match its pods' labels %v (%v)", set.Spec.Selector, pod.Labels, err)
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas < 2 {
		t.Errorf("want several shards, got %v replicas", set.Spec.Replicas)
	}
	var claimed []string
	for _, c := range set.Spec.VolumeClaimTemplates {
		claimed = append(claimed, c.Name)
	}
	if !slices.Contains(claimed, "data") {
		t.Errorf("the data volume is claimed per pod, not %v: each shard needs a store of its own", claimed)
	}
	ports, _ := observerPod(t, pod.Spec, cm, claimed...)
	var headless, ui *corev1.Service
	for i, s := range m.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = &m.services[i]
		} else {
			ui = &m.services[i]
		}
	}
	if headless == nil || ui == nil || headless.Name != set.Spec.ServiceName {
		t.Fatalf("want a headless Service named as the StatefulSet's serviceName %q, and a UI Service", set.Spec.ServiceName)
	}
	scraped(t, pod.Labels, ports, *headless, mon)
	if !labels.SelectorFromSet(ui.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the UI Service's selector %v does not match the pods' labels %v", ui.Spec.Selector, pod.Labels)
	}

	// The group, from the environment.
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if f := env["POD_NAME"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME is not the pod's name: %+v", env["POD_NAME"])
	}
	if env["PARSLEY_GROUP"].Value == "" {
		t.Error("PARSLEY_GROUP is unset: the pods are not a group")
	}
	if v := env["PARSLEY_INSTANCE"].Value; v != "$(POD_NAME)" {
		t.Errorf("PARSLEY_INSTANCE %q: want the pod's name, stable across restarts", v)
	}
	want := fmt.Sprintf("http://$(POD_NAME).%s:%d/", headless.Name, ports["http"])
	if v := env["PARSLEY_ADVERTISE_URL"].Value; v != want {
		t.Errorf("PARSLEY_ADVERTISE_URL %q, want %q: the headless Service's name for the pod, on the UI's port", v, want)
	}
	if _, err := time.ParseDuration(env["PARSLEY_SESSION_TIMEOUT"].Value); err != nil {
		t.Errorf("PARSLEY_SESSION_TIMEOUT: %v", err)
	}
	flags := flagEnv(t)
	for name := range env {
		if strings.HasPrefix(name, "PARSLEY_") && !flags[name] {
			t.Errorf("%s names no flag of parsley-observe", name)
		}
	}
}

// flagEnv returns the environment variables parsley-observe's flags read:
// PARSLEY_ and each flag's name in capitals, dashes as underscores, and
// the two older names.
func flagEnv(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"PARSLEY_BROKERS": true, "PARSLEY_OBSERVER_DB": true}
	files, err := filepath.Glob("../../cmd/parsley-observe/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no parsley-observe sources: %v", err)
	}
	name := regexp.MustCompile(`Name: +"([a-z][a-z0-9-]*)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			out["PARSLEY_"+strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_"))] = true
		}
	}
	if !out["PARSLEY_GROUP"] || !out["PARSLEY_LISTEN"] {
		t.Fatalf("read no group or listen flag from cmd/parsley-observe: %v", out)
	}
	return out
}

// observerPod checks a pod running the observer from the ConfigMap cm
// (claimed names the volumes a StatefulSet claims for each pod): one
// container; probes that ask the observer's endpoints on named ports;
// every mount a volume; a read-only root filesystem; the ConfigMap the
// example config file, run as serve --config from its mount; the config's
// paths on mounts and its port exposed. It returns the container's named
// ports and the pod's volumes.
func observerPod(t *testing.T, pod corev1.PodSpec, cm corev1.ConfigMap, claimed ...string) (map[string]int32, map[string]corev1.Volume) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", name)
			continue
		}
		if p := probe.HTTPGet.Path; p != "/livez" && p != "/readyz" {
			t.Errorf("%s probe asks %s, which the observer does not serve", name, p)
		}
		if _, ok := ports[probe.HTTPGet.Port.StrVal]; !ok {
			t.Errorf("%s probe: port %v is no named container port", name, probe.HTTPGet.Port)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{} // mount path → volume
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok && !slices.Contains(claimed, vm.Name) {
			t.Errorf("mount %s names no volume %q", vm.MountPath, vm.Name)
		}
		mounts[vm.MountPath] = vm.Name
	}
	if v := volumes["config"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
		t.Errorf("the config volume is not the ConfigMap %q", cm.Name)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("want a read-only root filesystem")
	}

	// The config file.
	want, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	cfgText, ok := cm.Data["parsley-observe.yaml"]
	if !ok || cfgText != string(want) {
		t.Fatalf("the ConfigMap's parsley-observe.yaml differs from %s: keep them identical", configFile)
	}
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(want, &cfg); err != nil {
		t.Fatal(err)
	}
	configPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			configPath = c.Args[i+1]
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" || mounts[configPath] != "config" {
		t.Errorf("args %q: want serve --config at the config volume's mount", c.Args)
	}
	onMount := func(key string) {
		p, _ := cfg[key].(string)
		for mp := path.Dir(p); mp != "/" && mp != "."; mp = path.Dir(mp) {
			if _, ok := mounts[mp]; ok {
				return
			}
		}
		t.Errorf("config %s %q lies on no volume mount", key, p)
	}
	for _, k := range []string{"db", "tls-ca", "sasl-password-file"} {
		onMount(k)
	}
	listen, _ := cfg["listen"].(string)
	if !strings.HasPrefix(listen, "0.0.0.0:") && !strings.HasPrefix(listen, ":") {
		t.Errorf("config listen %q: a pod must listen on all interfaces", listen)
	}
	port := listen[strings.LastIndex(listen, ":")+1:]
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == port }) {
		t.Errorf("config listen %q: no container port %s", listen, port)
	}
	return ports, volumes
}

// scraped checks that a Service selects the pods labelled podLabels and
// targets their named ports, and that the ServiceMonitor selects the
// Service and scrapes /metrics on one of its ports.
func scraped(t *testing.T, podLabels map[string]string, ports map[string]int32, svc corev1.Service, mon monitoringv1.ServiceMonitor) {
	t.Helper()
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
		t.Errorf("the Service's selector %v does not match the pods' labels %v", svc.Spec.Selector, podLabels)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = true
		if _, ok := ports[p.TargetPort.StrVal]; !ok {
			t.Errorf("Service port %s targets %v, no named container port", p.Name, p.TargetPort)
		}
	}
	msel, err := metav1.LabelSelectorAsSelector(&mon.Spec.Selector)
	if err != nil || !msel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor's selector does not match the Service's labels %v (%v)", svc.Labels, err)
	}
	if len(mon.Spec.Endpoints) != 1 || !svcPorts[mon.Spec.Endpoints[0].Port] || mon.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("the ServiceMonitor must scrape /metrics on a Service port: %+v", mon.Spec.Endpoints)
	}
}
