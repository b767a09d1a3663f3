// Package validate checks the Kubernetes manifests of deploy/k8s offline:
// every document decodes strictly into its k8s.io/api type, and the
// probes, ports and mounted files agree with what the binaries make of
// the manifests' own arguments (ticketd and tckclk-agent --print-config).
// It is a module of its own so that k8s.io stays out of the product's
// go.mod; validate_test.go runs it in CI (.ci/run).
package validate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest document.
type Object struct {
	File string // base name of the manifest file
	Kind string
	Name string
	Obj  any // *appsv1.StatefulSet, *corev1.Service, ...
}

// kinds maps apiVersion/kind to a new typed object; anything else is
// refused, so a typo in either never passes as "unknown, skipped".
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":                       func() any { return new(corev1.ConfigMap) },
	"v1/Service":                         func() any { return new(corev1.Service) },
	"apps/v1/DaemonSet":                  func() any { return new(appsv1.DaemonSet) },
	"apps/v1/StatefulSet":                func() any { return new(appsv1.StatefulSet) },
	"apps/v1/Deployment":                 func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":      func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return new(networkingv1.NetworkPolicy) },
}

// Decode splits a manifest file into documents and decodes each strictly:
// an unknown or duplicate field, a wrong type or an unknown kind is an
// error naming the file and the document.
func Decode(file string, data []byte) ([]Object, error) {
	var out []Object
	for i, doc := range splitDocs(data) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %v", file, i+1, err)
		}
		mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: document %d: apiVersion %q kind %q is not one the validator knows", file, i+1, tm.APIVersion, tm.Kind)
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %v", file, i+1, tm.Kind, err)
		}
		var raw any
		if err := yaml.Unmarshal(doc, &raw); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %v", file, i+1, tm.Kind, err)
		}
		if err := exactKeys(reflect.TypeOf(obj), raw, ""); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %v", file, i+1, tm.Kind, err)
		}
		name := obj.(metav1.ObjectMetaAccessor).GetObjectMeta().GetName()
		if name == "" {
			return nil, fmt.Errorf("%s: document %d (%s): metadata.name is empty", file, i+1, tm.Kind)
		}
		out = append(out, Object{File: filepath.Base(file), Kind: tm.Kind, Name: name, Obj: obj})
	}
	return out, nil
}

// LoadDir decodes every *.yaml file of dir.
func LoadDir(dir string) ([]Object, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %s", dir)
	}
	var all []Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(f, b)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if strings.TrimRight(string(line), " \r\n") == "---" {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
		}
	}
	return out
}

// Set is the decoded manifests, looked up by kind and name.
type Set []Object

// Get returns the object of kind and name, or nil.
func (s Set) Get(kind, name string) any {
	for _, o := range s {
		if o.Kind == kind && o.Name == name {
			return o.Obj
		}
	}
	return nil
}

// All returns the objects of kind.
func (s Set) All(kind string) []Object {
	var out []Object
	for _, o := range s {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}
