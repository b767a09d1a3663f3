package validate

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const manifests = ".." // deploy/k8s

var (
	buildOnce sync.Once
	bins      Binaries
	buildErr  error
)

// binaries builds ticketd and tckclk-agent from this checkout once.
func binaries(t *testing.T) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tckclk-k8s-validate-")
		if err != nil {
			buildErr = err
			return
		}
		bins, buildErr = BuildBinaries(filepath.Join("..", "..", ".."), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.TmpDir != "" {
		os.RemoveAll(bins.TmpDir)
	}
	os.Exit(code)
}

func load(t *testing.T) Set {
	t.Helper()
	objs, err := LoadDir(manifests)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// Issue 15 item 3: every shipped manifest decodes strictly into the
// k8s.io/api types, and its probes, ports and mounted files agree with the
// binaries built from this checkout, run with the manifests' own args.
func TestManifestsAgreeWithTheBinaries(t *testing.T) {
	s := load(t)
	want := map[string]bool{"Namespace/tckclk": false, "DaemonSet/tckclk-agent": false, "Service/tckclk-agent": false,
		"NetworkPolicy/tckclk-agent": false, "ConfigMap/ticketd": false, "Service/ticketd": false, "Service/ticketd-api": false,
		"StatefulSet/ticketd": false, "PodDisruptionBudget/ticketd": false, "NetworkPolicy/ticketd": false}
	for _, o := range s {
		k := o.Kind + "/" + o.Name
		if _, ok := want[k]; !ok {
			t.Errorf("%s in %s: not checked by this test; add it to want and to Check", k, o.File)
		}
		want[k] = true
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("%s is missing from deploy/k8s", k)
		}
	}
	for _, p := range Check(s, binaries(t)) {
		t.Error(p)
	}
}

// The strict decoder refuses what the API server would drop or reject.
func TestDecodeIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: tckclk}\nspec: {clusterIp: None}\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: tckclk}\nspec: {ports: [{port: seventy}]}\n",
		"duplicate key": "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: tckclk}\nspec: {clusterIP: None, clusterIP: 10.0.0.1}\n",
		"nested case":   "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x, namespace: tckclk}\nspec: {template: {spec: {containers: [{name: c, readinessprobe: {}}]}}}\n",
		"unknown kind":  "apiVersion: apps/v1\nkind: StatefulSett\nmetadata: {name: x}\n",
		"wrong version": "apiVersion: v1\nkind: StatefulSet\nmetadata: {name: x}\n",
		"no name":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: tckclk}\n",
	} {
		if _, err := Decode("t.yaml", []byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	objs, err := Decode("t.yaml", []byte("# c\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: tckclk}\n---\n# only a comment\n"))
	if err != nil || len(objs) != 1 || objs[0].Name != "a" {
		t.Fatalf("comment-only documents: %v %v", objs, err)
	}
}

// Each check can fail: a manifest broken in one place gives a problem
// that names it.
func TestChecksCatchBreakage(t *testing.T) {
	b := binaries(t)
	for _, c := range []struct {
		name   string
		break_ func(Set)
		want   string
	}{
		{"readiness on the wrong path", func(s Set) {
			sts(s).Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/healthz"
		}, `readinessProbe path "/healthz", want "/readyz"`},
		{"readiness as a TCP connect", func(s Set) {
			pr := sts(s).Spec.Template.Spec.Containers[0].ReadinessProbe
			pr.HTTPGet, pr.TCPSocket = nil, &corev1.TCPSocketAction{Port: intstr.FromString("api")}
		}, "readinessProbe must be an httpGet on /readyz"},
		{"agent liveness on the TCKCLK/2 port", func(s Set) {
			ds(s).Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromString("tckclk")
		}, "livenessProbe port tckclk is 7970; the binary serves /livez on 7971"},
		{"readiness on the api port beside a health listener", func(s Set) {
			sts(s).Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Port = intstr.FromString("api")
		}, "readinessProbe port api is 7980; the binary serves /readyz on 7981"},
		{"health listener moved in the config only", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], "health_addr: 0.0.0.0:7981", "health_addr: 0.0.0.0:7991", 1)
		}, "containerPort health is 7981/TCP; the binary listens on 7991/TCP"},
		{"api port moved in the config only", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], "addr: 0.0.0.0:7980", "addr: 0.0.0.0:7990", 1)
		}, "containerPort api is 7980/TCP; the binary listens on 7990/TCP"},
		{"agent listens on another port", func(s Set) {
			c := &ds(s).Spec.Template.Spec.Containers[0]
			c.Args[0] = "--listen=0.0.0.0:7975"
		}, "containerPort tckclk is 7970/TCP; the binary listens on 7975/TCP"},
		{"a flag ticketd does not know", func(s Set) {
			c := &sts(s).Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "--cluster.membership.bindaddr=1.2.3.4")
		}, "flag provided but not defined"},
		{"secret path not mounted", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], "/run/secrets/tckclk/gossip.key", "/run/secrets/gossip.key", 1)
		}, "cluster.membership.secret_file /run/secrets/gossip.key: no volumeMount holds it"},
		{"secret mode 0440", func(s Set) {
			m := int32(0o440)
			vol(sts(s), "secrets").Projected.DefaultMode = &m
		}, "mode 0440, want 0400"},
		{"fsGroup", func(s Set) {
			g := int64(65532)
			sts(s).Spec.Template.Spec.SecurityContext.FSGroup = &g
		}, "fsGroup makes secret files group-readable"},
		{"identity of a spare missing", func(s Set) {
			src := vol(sts(s), "secrets").Projected.Sources
			last := src[len(src)-1].Secret
			last.Items = last.Items[:len(last.Items)-1]
		}, "the identity of ticketd-4"},
		{"an undefined env in args", func(s Set) {
			c := &sts(s).Spec.Template.Spec.Containers[0]
			c.Args[1] = "--cluster.name=$(HOSTNAME)"
		}, "uses $(HOSTNAME)"},
		{"OrderedReady", func(s Set) {
			sts(s).Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		}, "podManagementPolicy"},
		{"headless Service hides unready pods", func(s Set) {
			s.Get("Service", "ticketd").(*corev1.Service).Spec.PublishNotReadyAddresses = false
		}, "publishNotReadyAddresses false"},
		{"join through a name that is not the headless Service", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], `"ticketd.tckclk.svc.cluster.local:7946"`, `"ticketd-api.tckclk.svc.cluster.local:7946"`, 1)
		}, "want the headless Service's DNS name"},
		{"zone spread on another label than failure_domain", func(s Set) {
			sts(s).Spec.Template.Spec.TopologySpreadConstraints[0].TopologyKey = "kubernetes.io/hostname"
		}, "no topologySpreadConstraint over topology.kubernetes.io/zone"},
		{"agent open to every pod", func(s Set) {
			s.Get("NetworkPolicy", "tckclk-agent").(*networkingv1.NetworkPolicy).Spec.Ingress[0].From = nil
		}, "port 7970 is open to every source"},
		{"PDB lets quorum go", func(s Set) {
			two := intstr.FromInt32(2)
			s.Get("PodDisruptionBudget", "ticketd").(*policyv1.PodDisruptionBudget).Spec.MaxUnavailable = &two
		}, "maxUnavailable 2 with 3 replicas"},
		{"data dir not on the claim", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], "data_dir: /var/lib/ticketd/data", "data_dir: /data", 1)
		}, "cluster.raft.data_dir /data is not a directory directly inside a mount"},
		{"data dir is the mount point", func(s Set) {
			cm(s).Data["ticketd.yaml"] = strings.Replace(cm(s).Data["ticketd.yaml"], "data_dir: /var/lib/ticketd/data", "data_dir: /var/lib/ticketd", 1)
		}, "cluster.raft.data_dir /var/lib/ticketd is the mount point of volume data"},
	} {
		s := load(t)
		c.break_(s)
		got := strings.Join(Check(s, b), "\n")
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: problems %q; want one with %q", c.name, got, c.want)
		}
	}
}

func sts(s Set) *appsv1.StatefulSet { return s.Get("StatefulSet", "ticketd").(*appsv1.StatefulSet) }
func ds(s Set) *appsv1.DaemonSet    { return s.Get("DaemonSet", "tckclk-agent").(*appsv1.DaemonSet) }
func cm(s Set) *corev1.ConfigMap    { return s.Get("ConfigMap", "ticketd").(*corev1.ConfigMap) }

func vol(st *appsv1.StatefulSet, name string) *corev1.Volume {
	for i := range st.Spec.Template.Spec.Volumes {
		if v := &st.Spec.Template.Spec.Volumes[i]; v.Name == name {
			return v
		}
	}
	return nil
}
