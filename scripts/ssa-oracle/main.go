// Command ssa-oracle runs server-side apply sequences through structured-merge-diff, the
// library kube-apiserver implements server-side apply with, so testkit's own implementation
// can be checked against it (testkit/tests/ssa_oracle.rs).
//
// Usage: ssa-oracle DEFINITIONS.json < cases.json > results.json
//
// DEFINITIONS.json is the Kubernetes JSON schema definitions file testkit reads; the
// structured-merge-diff schema is built from it as kube-openapi's schema conversion does
// (list types, merge keys, atomic maps, untyped int-or-string). Each case names a definition
// ("type") or carries a CRD's openAPIV3Schema ("schema"), and a sequence of steps: apply or
// update, by a manager, of an object. Like kube-apiserver's field manager, it strips the
// metadata fields the server owns from every set and drops empty sets.
package main

import (
	"encoding/json"
	"fmt"
	"io/ioutil"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/merge"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

type step struct {
	Manager string                 `json:"manager"`
	Op      string                 `json:"op"`
	Force   bool                   `json:"force"`
	Object  map[string]interface{} `json:"object"`
}

type testCase struct {
	Type       string                 `json:"type"`
	Schema     map[string]interface{} `json:"schema"`
	APIVersion string                 `json:"apiVersion"`
	Steps      []step                 `json:"steps"`
}

type conflict struct {
	Manager string `json:"manager"`
	Path    string `json:"path"`
}

type result struct {
	Error     string                     `json:"error,omitempty"`
	Conflicts []conflict                 `json:"conflicts,omitempty"`
	Object    interface{}                `json:"object"`
	Managed   map[string]json.RawMessage `json:"managed"`
}

// converter turns JSON schema nodes into structured-merge-diff types.
type converter struct {
	defs  map[string]map[string]interface{}
	types map[string]schema.TypeDef
}

const untypedAtomic = "__untyped_atomic_"
const untypedDeduced = "__untyped_deduced_"

func named(n string) schema.TypeRef { return schema.TypeRef{NamedType: &n} }

func (c *converter) define(name string) {
	if _, done := c.types[name]; done {
		return
	}
	c.types[name] = schema.TypeDef{Name: name}
	node, ok := c.defs[name]
	if !ok {
		c.types[name] = schema.TypeDef{Name: name, Atom: schema.Atom{Scalar: scalar("untyped")}}
		return
	}
	c.types[name] = schema.TypeDef{Name: name, Atom: c.atom(node, true)}
}

func scalar(s string) *schema.Scalar { x := schema.Scalar(s); return &x }

func str(node map[string]interface{}, key string) string {
	s, _ := node[key].(string)
	return s
}

func types(node map[string]interface{}) []string {
	switch t := node["type"].(type) {
	case string:
		return []string{t}
	case []interface{}:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (c *converter) ref(node map[string]interface{}, builtin bool) schema.TypeRef {
	if r := str(node, "$ref"); r != "" {
		name := strings.TrimPrefix(r, "#/$defs/")
		c.define(name)
		return named(name)
	}
	return schema.TypeRef{Inlined: c.atom(node, builtin)}
}

// atom converts one node; builtin says it comes from the Kubernetes definitions (not a CRD).
func (c *converter) atom(node map[string]interface{}, builtin bool) schema.Atom {
	if b, _ := node["x-kubernetes-int-or-string"].(bool); b {
		return schema.Atom{Scalar: scalar("untyped")}
	}
	if _, ok := node["oneOf"]; ok {
		return schema.Atom{Scalar: scalar("untyped")}
	}
	ts := types(node)
	props, hasProps := node["properties"].(map[string]interface{})
	preserve, _ := node["x-kubernetes-preserve-unknown-fields"].(bool)
	isArray := len(ts) > 0 && ts[0] == "array"
	if isArray {
		items, _ := node["items"].(map[string]interface{})
		l := &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic}
		if items != nil {
			l.ElementType = c.ref(items, builtin)
		}
		switch str(node, "x-kubernetes-list-type") {
		case "map":
			l.ElementRelationship = schema.Associative
			if keys, ok := node["x-kubernetes-list-map-keys"].([]interface{}); ok {
				for _, k := range keys {
					l.Keys = append(l.Keys, k.(string))
				}
			}
		case "set":
			l.ElementRelationship = schema.Associative
		case "atomic":
		default:
			if strings.Contains(str(node, "x-kubernetes-patch-strategy"), "merge") {
				l.ElementRelationship = schema.Associative
				if k := str(node, "x-kubernetes-patch-merge-key"); k != "" {
					l.Keys = []string{k}
				}
			}
		}
		return schema.Atom{List: l}
	}
	isObject := hasProps || (len(ts) > 0 && ts[0] == "object") || node["additionalProperties"] != nil
	if !isObject {
		if preserve || len(ts) == 0 {
			return schema.Atom{Scalar: scalar("untyped"), List: &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
				Map: &schema.Map{ElementType: named(untypedDeduced)}}
		}
		switch ts[0] {
		case "string":
			return schema.Atom{Scalar: scalar(string(schema.String))}
		case "integer", "number":
			return schema.Atom{Scalar: scalar(string(schema.Numeric))}
		case "boolean":
			return schema.Atom{Scalar: scalar(string(schema.Boolean))}
		}
		return schema.Atom{Scalar: scalar("untyped")}
	}
	m := &schema.Map{}
	if str(node, "x-kubernetes-map-type") == "atomic" {
		m.ElementRelationship = schema.Atomic
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		child, _ := props[k].(map[string]interface{})
		f := schema.StructField{Name: k, Type: c.ref(child, builtin)}
		if d, ok := child["default"]; ok {
			f.Default = d
		} else if builtin && k == "protocol" {
			// The real OpenAPI v3 defaults every port protocol to TCP (the v2-derived JSON
			// schemas leave it out); list map keys use it.
			f.Default = "TCP"
		}
		m.Fields = append(m.Fields, f)
	}
	if add, ok := node["additionalProperties"].(map[string]interface{}); ok {
		m.ElementType = c.ref(add, builtin)
	} else if preserve {
		m.ElementType = named(untypedDeduced)
	}
	return schema.Atom{Map: m}
}

func (c *converter) parser() *typed.Parser {
	p := &typed.Parser{}
	p.Schema.Types = append(p.Schema.Types,
		schema.TypeDef{Name: untypedAtomic, Atom: schema.Atom{Scalar: scalar("untyped"),
			List: &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:  &schema.Map{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic}}},
		schema.TypeDef{Name: untypedDeduced, Atom: schema.Atom{Scalar: scalar("untyped"),
			List: &schema.List{ElementType: named(untypedAtomic), ElementRelationship: schema.Atomic},
			Map:  &schema.Map{ElementType: named(untypedDeduced), ElementRelationship: schema.Separable}}})
	names := make([]string, 0, len(c.types))
	for n := range c.types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p.Schema.Types = append(p.Schema.Types, c.types[n])
	}
	return p
}

type identity struct{}

func (identity) Convert(o *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return o, nil
}
func (identity) IsMissingVersionError(error) bool { return false }

// stripped: what kube-apiserver's field manager removes from every manager's set.
var stripped = []fieldpath.Path{
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
}

func strip(managed fieldpath.ManagedFields) fieldpath.ManagedFields {
	out := fieldpath.ManagedFields{}
	for m, vs := range managed {
		set := vs.Set()
		for _, p := range stripped {
			set = set.Difference(fieldpath.NewSet(p))
		}
		if !set.Empty() {
			out[m] = fieldpath.NewVersionedSet(set, vs.APIVersion(), vs.Applied())
		}
	}
	return out
}

func run(defs map[string]map[string]interface{}, tc testCase) []result {
	c := &converter{defs: defs, types: map[string]schema.TypeDef{}}
	root := tc.Type
	if tc.Schema != nil {
		root = "crd.Root"
		props, _ := tc.Schema["properties"].(map[string]interface{})
		withMeta := map[string]interface{}{}
		for k, v := range tc.Schema {
			withMeta[k] = v
		}
		allProps := map[string]interface{}{
			"apiVersion": map[string]interface{}{"type": "string"},
			"kind":       map[string]interface{}{"type": "string"},
			"metadata":   map[string]interface{}{"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
		}
		for k, v := range props {
			allProps[k] = v
		}
		withMeta["properties"] = allProps
		c.types[root] = schema.TypeDef{Name: root, Atom: c.atom(withMeta, false)}
	}
	c.define(root)
	pt := c.parser().Type(root)
	updater := merge.Updater{Converter: identity{}}
	version := fieldpath.APIVersion(tc.APIVersion)
	// The server's typed empty object: metadata exists (an Update that creates does not add it).
	live, err := pt.FromUnstructured(map[string]interface{}{"metadata": map[string]interface{}{}})
	if err != nil {
		return []result{{Error: err.Error()}}
	}
	managed := fieldpath.ManagedFields{}
	var out []result
	for _, s := range tc.Steps {
		obj, err := pt.FromUnstructured(s.Object)
		if err != nil {
			out = append(out, result{Error: "parse: " + err.Error()})
			continue
		}
		key := s.Manager + "|" + s.Op
		var next *typed.TypedValue
		var nextManaged fieldpath.ManagedFields
		if s.Op == "Apply" {
			next, nextManaged, err = updater.Apply(live, obj, version, managed, key, s.Force)
		} else {
			next, nextManaged, err = updater.Update(live, obj, version, managed, key)
		}
		r := result{}
		if err != nil {
			if cs, ok := err.(merge.Conflicts); ok {
				for _, cf := range cs {
					r.Conflicts = append(r.Conflicts, conflict{Manager: cf.Manager, Path: cf.Path.String()})
				}
			} else {
				r.Error = err.Error()
			}
		} else {
			if next != nil {
				// Stored objects hold no nulls: kube-apiserver round-trips them through typed
				// objects (Go omits nil fields), so a container a removal emptied is gone.
				stored, err := pt.FromUnstructured(dropNulls(next.AsValue().Unstructured()))
				if err != nil {
					r.Error = "store: " + err.Error()
				} else {
					live = stored
				}
			}
			managed = strip(nextManaged)
		}
		r.Object = live.AsValue().Unstructured()
		r.Managed = map[string]json.RawMessage{}
		for m, vs := range managed {
			b, _ := vs.Set().ToJSON()
			r.Managed[m] = b
		}
		out = append(out, r)
	}
	return out
}

func dropNulls(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := map[string]interface{}{}
		for k, x := range t {
			if x != nil {
				out[k] = dropNulls(x)
			}
		}
		return out
	case []interface{}:
		out := make([]interface{}, 0, len(t))
		for _, x := range t {
			out = append(out, dropNulls(x))
		}
		return out
	}
	return v
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ssa-oracle DEFINITIONS.json < cases.json")
		os.Exit(2)
	}
	raw, err := ioutil.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading definitions:", err)
		os.Exit(1)
	}
	var doc struct {
		Defs map[string]map[string]interface{} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		fmt.Fprintln(os.Stderr, "parsing definitions:", err)
		os.Exit(1)
	}
	var cases []testCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "parsing cases:", err)
		os.Exit(1)
	}
	var results [][]result
	for _, tc := range cases {
		results = append(results, run(doc.Defs, tc))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "writing results:", err)
		os.Exit(1)
	}
}
