// Wrapper module of the server-side apply oracle: structured-merge-diff v6.3.0, the version
// k8s.io/kubernetes v1.35.4 (the real control plane of testkit kube) requires.
module stacksync.test/ssa-oracle

go 1.24

require sigs.k8s.io/structured-merge-diff/v6 v6.3.0

require (
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)
