// Reference evaluation of a cluster-stack values template (cluster-addon-values.yaml or a
// stage's overwrite.yaml), the way the SCS cluster-stack-operator evaluates it: Go's
// text/template with the sprig functions, data {Cluster, ControlPlane, InfraCluster}; a result
// that is a mapping with a string `values:` field is unwrapped to that string (yaml.v3).
//
// Usage: go run values.go TEMPLATE CLUSTER.json > values.yaml
// Built offline from Debian's packages (golang-go, golang-github-masterminds-sprig-dev,
// golang-gopkg-yaml.v3-dev) with GO111MODULE=off and GOPATH=/usr/share/gocode.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: values TEMPLATE CLUSTER.json")
		os.Exit(2)
	}
	text, err := os.ReadFile(os.Args[1])
	check(err)
	raw, err := os.ReadFile(os.Args[2])
	check(err)
	var cluster map[string]interface{}
	check(json.Unmarshal(raw, &cluster))
	tmpl, err := template.New("values").Funcs(sprig.TxtFuncMap()).Parse(string(text))
	check(err)
	var out bytes.Buffer
	check(tmpl.Execute(&out, map[string]interface{}{"Cluster": cluster}))
	var wrapped map[string]interface{}
	if yaml.Unmarshal(out.Bytes(), &wrapped) == nil {
		if v, ok := wrapped["values"].(string); ok {
			fmt.Print(v)
			return
		}
	}
	os.Stdout.Write(out.Bytes())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "values:", err)
		os.Exit(1)
	}
}
