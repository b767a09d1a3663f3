package validate

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// ImageUID is the numeric USER of both images (deploy/docker).
const ImageUID = 65532

// Namespace is where every namespaced object belongs.
const Namespace = "tckclk"

// Binaries are the real programs whose --print-config judges the args.
type Binaries struct {
	Ticketd, Agent string
	TmpDir         string // where the ConfigMap's file is written for --config
}

// problems collects what is wrong, each naming the object.
type problems []string

func (p *problems) add(format string, a ...any) { *p = append(*p, fmt.Sprintf(format, a...)) }

// Check runs every check over the manifests; nil means all agree.
func Check(s Set, bin Binaries) []string {
	var p problems
	for _, o := range s {
		if o.Kind == "Namespace" {
			continue
		}
		if ns := o.Obj.(interface{ GetNamespace() string }).GetNamespace(); ns != Namespace {
			p.add("%s %s (%s): namespace %q, want %q", o.Kind, o.Name, o.File, ns, Namespace)
		}
	}
	checkAgent(s, bin, &p)
	checkTicketd(s, bin, &p)
	return p
}

// ---- the agent ----------------------------------------------------------

func checkAgent(s Set, bin Binaries, p *problems) {
	ds, _ := s.Get("DaemonSet", "tckclk-agent").(*appsv1.DaemonSet)
	if ds == nil {
		p.add("no DaemonSet tckclk-agent")
		return
	}
	where := "DaemonSet tckclk-agent"
	spec := ds.Spec.Template.Spec
	c := checkWorkload(where, ds.Spec.Selector.MatchLabels, ds.Spec.Template, "agent", p)
	if c == nil {
		return
	}
	for _, a := range c.Args {
		if strings.Contains(a, "--dev") {
			p.add("%s: --dev (a development reference) in a production manifest", where)
		}
	}
	cfg, err := printConfig(bin.Agent, expandArgs(where, c, nil, p), true)
	if err != nil {
		p.add("%s: tckclk-agent --print-config with the manifest's args: %v", where, err)
		return
	}
	listen := portOf(where, "listen", str(cfg, "listen"), p)
	httpPort := portOf(where, "http", str(cfg, "http"), p)
	if h := hostOf(str(cfg, "http")); h != "0.0.0.0" && h != "" {
		p.add("%s: --http %s: kubelet probes the pod's IP, listen on 0.0.0.0", where, str(cfg, "http"))
	}
	checkNamedPort(where, c, "tckclk", listen, p)
	checkNamedPort(where, c, "http", httpPort, p)
	checkProbe(where, "readinessProbe", c, c.ReadinessProbe, "/readyz", httpPort, p)
	checkProbe(where, "livenessProbe", c, c.LivenessProbe, "/livez", httpPort, p)
	checkSecretFile(where, spec, c, "secret_file", str(cfg, "secret_file"), p)

	svc, _ := s.Get("Service", "tckclk-agent").(*corev1.Service)
	if svc == nil {
		p.add("no Service tckclk-agent")
	} else {
		checkSelector("Service tckclk-agent", svc.Spec.Selector, ds.Spec.Template.Labels, p)
		checkServicePorts("Service tckclk-agent", svc, c, p)
	}
	np, _ := s.Get("NetworkPolicy", "tckclk-agent").(*networkingv1.NetworkPolicy)
	if np == nil {
		p.add("no NetworkPolicy tckclk-agent")
		return
	}
	checkSelector("NetworkPolicy tckclk-agent", np.Spec.PodSelector.MatchLabels, ds.Spec.Template.Labels, p)
	sts, _ := s.Get("StatefulSet", "ticketd").(*appsv1.StatefulSet)
	if sts != nil {
		checkOnlyFrom("NetworkPolicy tckclk-agent", np, listen, sts.Spec.Template.Labels, p)
	}
}

// ---- ticketd ------------------------------------------------------------

func checkTicketd(s Set, bin Binaries, p *problems) {
	sts, _ := s.Get("StatefulSet", "ticketd").(*appsv1.StatefulSet)
	if sts == nil {
		p.add("no StatefulSet ticketd")
		return
	}
	where := "StatefulSet ticketd"
	spec := sts.Spec.Template.Spec
	labels := sts.Spec.Template.Labels
	c := checkWorkload(where, sts.Spec.Selector.MatchLabels, sts.Spec.Template, "ticketd", p)
	if c == nil {
		return
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		p.add("%s: podManagementPolicy %q: bootstrap_expect needs every pod started at once (Parallel); OrderedReady waits for a readiness that needs the peers", where, sts.Spec.PodManagementPolicy)
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	headless, _ := s.Get("Service", sts.Spec.ServiceName).(*corev1.Service)
	if headless == nil {
		p.add("%s: serviceName %q names no Service", where, sts.Spec.ServiceName)
	} else {
		hw := "Service " + headless.Name
		if headless.Spec.ClusterIP != corev1.ClusterIPNone {
			p.add("%s: clusterIP %q, want None (headless, for the pods' DNS names)", hw, headless.Spec.ClusterIP)
		}
		if !headless.Spec.PublishNotReadyAddresses {
			p.add("%s: publishNotReadyAddresses false: peers must find each other before any is ready", hw)
		}
		checkSelector(hw, headless.Spec.Selector, labels, p)
	}
	zoneLabel := checkZone(where, spec, c, p)

	// Every pod the StatefulSet makes: the args as the kubelet expands them.
	cm := configFor(where, s, spec, c, p)
	var voters int
	for ord := int32(0); ord < replicas; ord++ {
		pod := fmt.Sprintf("%s-%d", sts.Name, ord)
		env := map[string]string{"POD_NAME": pod, "POD_IP": fmt.Sprintf("10.0.0.%d", 10+ord), "ZONE": fmt.Sprintf("zone-%c", 'a'+ord)}
		args := expandArgs(where, c, env, p)
		args, ok := redirectConfig(where, bin.TmpDir, args, cm, p)
		if !ok {
			return
		}
		cfg, err := printConfig(bin.Ticketd, args, false)
		if err != nil {
			p.add("%s (%s): ticketd --print-config with the manifest's args: %v", where, pod, err)
			return
		}
		pw := where + " (" + pod + ")"
		for key, want := range map[string]string{
			"cluster.enabled":               "true",
			"cluster.name":                  pod,
			"cluster.membership.bind_addr":  env["POD_IP"],
			"cluster.failure_domain":        env["ZONE"],
			"cluster.raft.bootstrap_expect": strconv.Itoa(int(replicas)),
		} {
			if got := str(cfg, key); got != want {
				p.add("%s: %s is %q, want %q", pw, key, got, want)
			}
		}
		if zoneLabel == "" {
			p.add("%s: cluster.failure_domain does not come from the zone the pods are spread over", pw)
		}
		if _, ok := mapAt(cfg, "cluster.internode.trusted_peer_keys")[pod]; !ok {
			p.add("%s: cluster.internode.trusted_peer_keys has no %s (it must hold the node itself)", pw, pod)
		}
		if ord > 0 {
			continue // the rest is the same for every pod
		}
		api := portOf(pw, "api.addr", str(cfg, "api.addr"), p)
		if h := hostOf(str(cfg, "api.addr")); h != "0.0.0.0" {
			p.add("%s: api.addr %s: kubelet probes the pod's IP, listen on 0.0.0.0", pw, str(cfg, "api.addr"))
		}
		gossip := intAt(cfg, "cluster.membership.bind_port")
		mesh := intAt(cfg, "cluster.internode.bind_port")
		if mesh == 0 {
			p.add("%s: cluster.internode.bind_port 0 (auto-picked): pin it for the Service and the NetworkPolicy", pw)
		}
		checkNamedPort(pw, c, "api", api, p)
		// Probes go to the health listener when there is one.
		probePort := api
		if ha := str(cfg, "api.health_addr"); ha != "" {
			probePort = portOf(pw, "api.health_addr", ha, p)
			if h := hostOf(ha); h != "0.0.0.0" {
				p.add("%s: api.health_addr %s: kubelet probes the pod's IP, listen on 0.0.0.0", pw, ha)
			}
			checkNamedPort(pw, c, "health", probePort, p)
		}
		checkNamedPortProto(pw, c, "gossip", gossip, corev1.ProtocolTCP, p)
		checkNamedPortProto(pw, c, "gossip-udp", gossip, corev1.ProtocolUDP, p)
		checkNamedPort(pw, c, "mesh", mesh, p)
		checkProbe(pw, "readinessProbe", c, c.ReadinessProbe, "/readyz", probePort, p)
		checkProbe(pw, "livenessProbe", c, c.LivenessProbe, "/livez", probePort, p)
		for _, key := range []string{"cluster.membership.secret_file", "cluster.internode.identity_key_file", "clock.secret_file", "api.token_file", "api.admin_token_file"} {
			if f := str(cfg, key); f != "" {
				checkSecretFile(pw, spec, c, key, f, p)
			}
		}
		for name := range mapAt(cfg, "cluster.internode.trusted_peer_keys") {
			checkSecretFile(pw, spec, c, "the identity of "+name, path.Join(path.Dir(str(cfg, "cluster.internode.identity_key_file")), name+".key"), p)
			voters++
		}
		checkDataDir(pw, sts, c, str(cfg, "cluster.raft.data_dir"), p)
		if headless != nil {
			want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", headless.Name, Namespace, gossip)
			if got := str(cfg, "cluster.membership.join_addrs"); got != want {
				p.add("%s: cluster.membership.join_addrs %q, want the headless Service's DNS name %q", pw, got, want)
			}
			checkServicePorts("Service "+headless.Name, headless, c, p)
		}
		if agentSvc, _ := s.Get("Service", "tckclk-agent").(*corev1.Service); agentSvc != nil && len(agentSvc.Spec.Ports) > 0 {
			want := fmt.Sprintf("%s.%s.svc.cluster.local:%d", agentSvc.Name, Namespace, agentSvc.Spec.Ports[0].Port)
			if got := str(cfg, "clock.agent_addr"); got != want {
				p.add("%s: clock.agent_addr %q, want the agent Service %q", pw, got, want)
			}
		}
		if api2, _ := s.Get("Service", "ticketd-api").(*corev1.Service); api2 == nil {
			p.add("no Service ticketd-api")
		} else {
			checkSelector("Service ticketd-api", api2.Spec.Selector, labels, p)
			checkServicePorts("Service ticketd-api", api2, c, p)
		}
		if np, _ := s.Get("NetworkPolicy", "ticketd").(*networkingv1.NetworkPolicy); np == nil {
			p.add("no NetworkPolicy ticketd")
		} else {
			checkSelector("NetworkPolicy ticketd", np.Spec.PodSelector.MatchLabels, labels, p)
			for _, port := range []int{gossip, mesh} {
				checkOnlyFrom("NetworkPolicy ticketd", np, port, labels, p)
			}
		}
	}
	if voters < int(replicas) {
		p.add("%s: the trust map holds %d names for %d replicas", where, voters, replicas)
	}
	checkPDB(s, sts, replicas, p)
}

// checkZone finds the zone label the pods are spread over and checks that
// the ZONE env (cluster.failure_domain) reads the same label.
func checkZone(where string, spec corev1.PodSpec, c *corev1.Container, p *problems) string {
	var key string
	for _, t := range spec.TopologySpreadConstraints {
		if t.TopologyKey == "topology.kubernetes.io/zone" && t.WhenUnsatisfiable == corev1.DoNotSchedule && t.MaxSkew == 1 {
			key = t.TopologyKey
		}
	}
	if key == "" {
		p.add("%s: no topologySpreadConstraint over topology.kubernetes.io/zone (maxSkew 1, DoNotSchedule)", where)
		return ""
	}
	for _, e := range c.Env {
		if e.Name == "ZONE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == "metadata.labels['"+key+"']" {
			return key
		}
	}
	p.add("%s: env ZONE does not read metadata.labels['%s']", where, key)
	return ""
}

func checkPDB(s Set, sts *appsv1.StatefulSet, replicas int32, p *problems) {
	pdb, _ := s.Get("PodDisruptionBudget", sts.Name).(*policyv1.PodDisruptionBudget)
	if pdb == nil {
		p.add("no PodDisruptionBudget %s", sts.Name)
		return
	}
	checkSelector("PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels, p)
	quorum := replicas/2 + 1
	switch {
	case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.Type == intstr.Int:
		if replicas-pdb.Spec.MaxUnavailable.IntVal < quorum || pdb.Spec.MaxUnavailable.IntVal < 1 {
			p.add("PodDisruptionBudget %s: maxUnavailable %d with %d replicas: want 1..%d (keep a quorum of %d)", pdb.Name, pdb.Spec.MaxUnavailable.IntVal, replicas, replicas-quorum, quorum)
		}
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		if pdb.Spec.MinAvailable.IntVal < quorum || pdb.Spec.MinAvailable.IntVal >= replicas {
			p.add("PodDisruptionBudget %s: minAvailable %d with %d replicas: want %d..%d", pdb.Name, pdb.Spec.MinAvailable.IntVal, replicas, quorum, replicas-1)
		}
	default:
		p.add("PodDisruptionBudget %s: want an integer maxUnavailable or minAvailable", pdb.Name)
	}
}

// ---- shared checks ------------------------------------------------------

// checkWorkload checks what a DaemonSet and a StatefulSet share and returns
// the named container, or nil.
func checkWorkload(where string, sel map[string]string, tmpl corev1.PodTemplateSpec, name string, p *problems) *corev1.Container {
	checkSelector(where, sel, tmpl.Labels, p)
	checkPodSecurity(where, tmpl.Spec, p)
	c := container(where, tmpl.Spec, name, p)
	if c != nil && len(c.Command) != 0 {
		p.add("%s: command overrides the image's entrypoint; use args", where)
	}
	return c
}

func container(where string, spec corev1.PodSpec, name string, p *problems) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	p.add("%s: no container %q", where, name)
	return nil
}

func checkSelector(where string, sel, labels map[string]string, p *problems) {
	if len(sel) == 0 {
		p.add("%s: empty selector", where)
	}
	for k, v := range sel {
		if labels[k] != v {
			p.add("%s: selector %s=%s does not match the pods' labels %v", where, k, v, labels)
		}
	}
}

func checkPodSecurity(where string, spec corev1.PodSpec, p *problems) {
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != ImageUID {
		p.add("%s: pod securityContext must set runAsNonRoot and runAsUser %d (the images' USER)", where, ImageUID)
	}
	if sc != nil && sc.FSGroup != nil {
		p.add("%s: fsGroup makes secret files group-readable (0440), which the binaries refuse", where)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		p.add("%s: automountServiceAccountToken must be false (neither binary talks to the API server)", where)
	}
	for _, c := range spec.Containers {
		cs := c.SecurityContext
		if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
			cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
			cs.Capabilities == nil || len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" {
			p.add("%s: container %s: want allowPrivilegeEscalation false, readOnlyRootFilesystem true, capabilities drop [ALL]", where, c.Name)
		}
	}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs expands $(VAR) in the args as the kubelet does, with the
// container's env (values from env for the downward-API ones); a
// reference to a variable the container does not define stays literal in
// Kubernetes, so it is a problem here.
func expandArgs(where string, c *corev1.Container, vals map[string]string, p *problems) []string {
	defined := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			v, ok := vals[e.Name]
			if !ok {
				p.add("%s: env %s comes from the downward API; the validator has no value for it", where, e.Name)
			}
			defined[e.Name] = v
		} else {
			defined[e.Name] = e.Value
		}
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
			name := m[2 : len(m)-1]
			v, ok := defined[name]
			if !ok {
				p.add("%s: arg %q uses $(%s), which the container's env does not define", where, a, name)
				return m
			}
			return v
		})
	}
	return out
}

// configFor returns the ConfigMap file that --config names, checking that
// the path is a mounted item of a ConfigMap volume.
func configFor(where string, s Set, spec corev1.PodSpec, c *corev1.Container, p *problems) string {
	var cfgPath string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	if cfgPath == "" {
		p.add("%s: no --config=PATH in args", where)
		return ""
	}
	src, why := provider(spec, c, cfgPath)
	if src == nil || src.configMap == "" {
		p.add("%s: --config %s: %s", where, cfgPath, orWhy(why, "not a ConfigMap item"))
		return ""
	}
	cm, _ := s.Get("ConfigMap", src.configMap).(*corev1.ConfigMap)
	if cm == nil {
		p.add("%s: --config %s: ConfigMap %q is not in the manifests", where, cfgPath, src.configMap)
		return ""
	}
	data, ok := cm.Data[src.key]
	if !ok {
		p.add("%s: --config %s: ConfigMap %s has no key %q", where, cfgPath, cm.Name, src.key)
	}
	return data
}

// redirectConfig writes the ConfigMap's text to a temporary file and
// points --config at it.
func redirectConfig(where, dir string, args []string, cm string, p *problems) ([]string, bool) {
	if cm == "" {
		return nil, false
	}
	f, err := os.CreateTemp(dir, "ticketd-*.yaml")
	if err != nil {
		p.add("%s: %v", where, err)
		return nil, false
	}
	defer f.Close()
	if _, err := f.WriteString(cm); err != nil {
		p.add("%s: %v", where, err)
		return nil, false
	}
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + f.Name()
		}
		out[i] = a
	}
	return out, true
}

// source is what provides one mounted file.
type source struct {
	mount             corev1.VolumeMount
	secret, configMap string
	key               string
	mode              int32
	user              *int64
}

// provider finds the volume item that a file path in the container is.
func provider(spec corev1.PodSpec, c *corev1.Container, file string) (*source, string) {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, "no volumeMount holds it"
	}
	rel := strings.TrimPrefix(file, strings.TrimSuffix(best.MountPath, "/")+"/")
	if best.SubPath != "" {
		return nil, "mounted with subPath (never updated, and not checked here)"
	}
	for _, v := range spec.Volumes {
		if v.Name != best.Name {
			continue
		}
		switch {
		case v.Projected != nil:
			for _, ps := range v.Projected.Sources {
				if ps.Secret == nil {
					continue
				}
				for _, it := range ps.Secret.Items {
					if it.Path == rel {
						return &source{mount: *best, secret: ps.Secret.Name, key: it.Key, mode: modeOf(it.Mode, v.Projected.DefaultMode), user: v.Projected.DefaultUser}, ""
					}
				}
			}
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return &source{mount: *best, secret: v.Secret.SecretName, key: it.Key, mode: modeOf(it.Mode, v.Secret.DefaultMode), user: v.Secret.DefaultUser}, ""
				}
			}
		case v.ConfigMap != nil:
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					return &source{mount: *best, configMap: v.ConfigMap.Name, key: it.Key, mode: modeOf(it.Mode, v.ConfigMap.DefaultMode)}, ""
				}
			}
		}
		return nil, fmt.Sprintf("volume %s (at %s) lists no item %q (list items explicitly)", v.Name, best.MountPath, rel)
	}
	return nil, fmt.Sprintf("volumeMount %s names no volume", best.Name)
}

func modeOf(item, def *int32) int32 {
	switch {
	case item != nil:
		return *item
	case def != nil:
		return *def
	}
	return 0o644 // the API's default
}

func orWhy(why, def string) string {
	if why != "" {
		return why
	}
	return def
}

// checkSecretFile: the file is a Secret item, mode 0400, owned by the
// pod's user, on a read-only mount.
func checkSecretFile(where string, spec corev1.PodSpec, c *corev1.Container, key, file string, p *problems) {
	src, why := provider(spec, c, file)
	if src == nil || src.secret == "" {
		p.add("%s: %s %s: %s", where, key, file, orWhy(why, "not a Secret item"))
		return
	}
	if src.mode != 0o400 {
		p.add("%s: %s %s: mode %#o, want 0400", where, key, file, src.mode)
	}
	if src.user == nil || *src.user != ImageUID {
		p.add("%s: %s %s: not owned by uid %d (defaultUser): the binaries cannot read a root-owned 0400 file", where, key, file, ImageUID)
	}
	if !src.mount.ReadOnly {
		p.add("%s: %s %s: mount %s is not readOnly", where, key, file, src.mount.MountPath)
	}
}

// checkDataDir: the data dir is a directory inside a volumeClaimTemplate's
// mount, one level down — not the mount point itself, which cannot be
// renamed: a retired data dir is moved aside beside it (SPEC §3.4,
// cluster.auto_replace).
func checkDataDir(where string, sts *appsv1.StatefulSet, c *corev1.Container, dir string, p *problems) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			p.add("%s: cluster.raft.data_dir %s is the mount point of volume %s: a retired data dir is moved aside beside it, which a mount point cannot be; use a directory inside it (%s/data)", where, dir, m.Name, path.Clean(dir))
			return
		}
		if path.Clean(m.MountPath) != path.Dir(path.Clean(dir)) {
			continue
		}
		if m.ReadOnly {
			p.add("%s: data dir %s is on a read-only mount", where, dir)
		}
		for _, t := range sts.Spec.VolumeClaimTemplates {
			if t.Name == m.Name {
				return
			}
		}
		p.add("%s: data dir %s is on volume %s, not a volumeClaimTemplate (Raft's log must outlive the pod)", where, dir, m.Name)
		return
	}
	p.add("%s: cluster.raft.data_dir %s is not a directory directly inside a mount (a read-only root filesystem)", where, dir)
}

func checkNamedPort(where string, c *corev1.Container, name string, want int, p *problems) {
	checkNamedPortProto(where, c, name, want, corev1.ProtocolTCP, p)
}

func checkNamedPortProto(where string, c *corev1.Container, name string, want int, proto corev1.Protocol, p *problems) {
	for _, cp := range c.Ports {
		if cp.Name == name {
			got := cp.Protocol
			if got == "" {
				got = corev1.ProtocolTCP
			}
			if int(cp.ContainerPort) != want || got != proto {
				p.add("%s: containerPort %s is %d/%s; the binary listens on %d/%s", where, name, cp.ContainerPort, got, want, proto)
			}
			return
		}
	}
	p.add("%s: no containerPort named %s (%d/%s)", where, name, want, proto)
}

func resolvePort(c *corev1.Container, port intstr.IntOrString) int {
	if port.Type == intstr.Int {
		return int(port.IntVal)
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return -1
}

func checkProbe(where, which string, c *corev1.Container, pr *corev1.Probe, wantPath string, wantPort int, p *problems) {
	if pr == nil || pr.HTTPGet == nil {
		p.add("%s: %s must be an httpGet on %s (never a TCP connect)", where, which, wantPath)
		return
	}
	if pr.HTTPGet.Path != wantPath {
		p.add("%s: %s path %q, want %q", where, which, pr.HTTPGet.Path, wantPath)
	}
	if got := resolvePort(c, pr.HTTPGet.Port); got != wantPort {
		p.add("%s: %s port %s is %d; the binary serves %s on %d", where, which, pr.HTTPGet.Port.String(), got, wantPath, wantPort)
	}
	if pr.HTTPGet.Scheme != "" && pr.HTTPGet.Scheme != corev1.URISchemeHTTP {
		p.add("%s: %s scheme %s, but the config serves plain HTTP", where, which, pr.HTTPGet.Scheme)
	}
}

func checkServicePorts(where string, svc *corev1.Service, c *corev1.Container, p *problems) {
	if len(svc.Spec.Ports) == 0 {
		p.add("%s: no ports", where)
	}
	for _, sp := range svc.Spec.Ports {
		tp := sp.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(sp.Port)
		}
		ok := false
		for _, cp := range c.Ports {
			proto := func(p corev1.Protocol) corev1.Protocol {
				if p == "" {
					return corev1.ProtocolTCP
				}
				return p
			}
			if proto(cp.Protocol) == proto(sp.Protocol) && ((tp.Type == intstr.String && cp.Name == tp.StrVal) || (tp.Type == intstr.Int && cp.ContainerPort == tp.IntVal)) {
				ok = true
			}
		}
		if !ok {
			p.add("%s: port %s targets %s/%s, which container %s does not expose", where, sp.Name, tp.String(), sp.Protocol, c.Name)
		}
	}
}

// checkOnlyFrom: some ingress rule lets pods with labels reach port, and no
// rule opens port to anyone else.
func checkOnlyFrom(where string, np *networkingv1.NetworkPolicy, port int, labels map[string]string, p *problems) {
	if len(np.Spec.PolicyTypes) == 0 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		p.add("%s: policyTypes must include Ingress", where)
	}
	allowed := false
	for _, r := range np.Spec.Ingress {
		covers := len(r.Ports) == 0
		for _, rp := range r.Ports {
			if rp.Port != nil && rp.Port.Type == intstr.Int && int(rp.Port.IntVal) == port {
				covers = true
			}
		}
		if !covers {
			continue
		}
		if len(r.From) == 0 {
			p.add("%s: port %d is open to every source", where, port)
		}
		for _, peer := range r.From {
			if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil {
				p.add("%s: port %d admits more than pods of this namespace labelled %v", where, port, labels)
				continue
			}
			match := len(peer.PodSelector.MatchLabels) > 0
			for k, v := range peer.PodSelector.MatchLabels {
				if labels[k] != v {
					match = false
				}
			}
			if match {
				allowed = true
			} else {
				p.add("%s: port %d admits pods %v, not only %v", where, port, peer.PodSelector.MatchLabels, labels)
			}
		}
	}
	if !allowed {
		p.add("%s: no ingress rule lets pods %v reach port %d", where, labels, port)
	}
}

// ---- the binaries -------------------------------------------------------

// printConfig runs bin ARGS --print-config and parses the YAML it prints.
// Both binaries load their secret files there and exit 2 when one is not
// there (they are only in the pod), still printing the config under a
// first line that says so: that one complaint — a file that does not
// exist here — is allowed (the agent's "# secret: NOT LOADABLE", ticketd's
// "# NOT STARTABLE"); any other is a problem.
func printConfig(bin string, args []string, agent bool) (map[string]any, error) {
	cmd := exec.Command(bin, append(args, "--print-config")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	first, _, _ := strings.Cut(stdout.String(), "\n")
	marker := "# NOT STARTABLE: "
	if agent {
		marker = "# secret: NOT LOADABLE"
	}
	podOnly := strings.HasPrefix(first, marker) && strings.HasSuffix(first, "no such file or directory")
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2 && podOnly) {
		return nil, fmt.Errorf("%v: %s%s", err, strings.TrimSpace(stderr.String()), strings.TrimSpace(stdout.String()))
	}
	var m map[string]any
	if err := yaml.Unmarshal(stdout.Bytes(), &m); err != nil {
		return nil, fmt.Errorf("parsing its output: %v", err)
	}
	return m, nil
}

func at(m map[string]any, dotted string) any {
	var cur any = m
	for _, k := range strings.Split(dotted, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func str(m map[string]any, key string) string {
	switch v := at(m, key).(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func intAt(m map[string]any, key string) int {
	n, _ := strconv.Atoi(str(m, key))
	return n
}

func mapAt(m map[string]any, key string) map[string]any {
	mm, _ := at(m, key).(map[string]any)
	return mm
}

func portOf(where, key, addr string, p *problems) int {
	_, port, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(port)
	if err != nil || err2 != nil {
		p.add("%s: %s %q is not HOST:PORT", where, key, addr)
		return -1
	}
	return n
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// BuildBinaries builds ticketd and tckclk-agent from the repository root
// into dir.
func BuildBinaries(root, dir string) (Binaries, error) {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/ticketd", "./cmd/tckclk-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return Binaries{Ticketd: filepath.Join(dir, "ticketd"), Agent: filepath.Join(dir, "tckclk-agent"), TmpDir: dir}, nil
}
