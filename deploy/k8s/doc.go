// Package k8s holds limiterd's Kubernetes manifests (the YAML files beside
// this one, applied with `kubectl apply -k deploy/k8s`) and the test that
// decodes them into the Kubernetes API types and checks their probes,
// ports, labels, drain timing and that limiterd accepts their config. It
// has no code of its own.
package k8s
