package check

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

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
	configFile   = "../config/parsley-observe.yaml"
)

// manifest is the manifest's objects, decoded strictly.
type manifest struct {
	configMaps []corev1.ConfigMap
	pvcs       []corev1.PersistentVolumeClaim
	deploys    []appsv1.Deployment
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
	if len(m.configMaps) != 1 || len(m.pvcs) != 1 || len(m.deploys) != 1 || len(m.services) != 1 || len(m.monitors) != 1 {
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
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
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
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{} // mount path → volume
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("mount %s names no volume %q", vm.MountPath, vm.Name)
		}
		mounts[vm.MountPath] = vm.Name
	}
	if v := volumes["data"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("the data volume is not the claim %q", pvc.Name)
	}
	if v := volumes["config"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
		t.Errorf("the config volume is not the ConfigMap %q", cm.Name)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("want a read-only root filesystem")
	}

	// The Service and the ServiceMonitor.
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Service's selector %v does not match the pods' labels %v", svc.Spec.Selector, pod.Labels)
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
}
